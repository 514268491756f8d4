#include "steadymoe/parallel/tcp_transport.hpp"

#include "steadymoe/core/error.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <fmt/format.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

namespace steadymoe {

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint32_t kHelloMagic = 0x534d4f45;    // "SMOE"
constexpr uint32_t kMessageMagic = 0x534d4f4d;  // "SMOM"
constexpr uint32_t kAbortMagic = 0x534d4f41;    // "SMOA": the sender gives up; its `round` names the culprit
constexpr uint64_t kMaxMessage = uint64_t(1) << 36;     // 64 GiB: a larger announced size is a damaged header
constexpr std::chrono::milliseconds kHelloWait{2000};  // for a new connection to say which rank it is
// How long a rank that gives up waits for the others to take its abort (all_to_all).
constexpr std::chrono::milliseconds kAbortLinger{1000};

int remaining_ms(Clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    return left <= 0 ? 0 : int(std::min<int64_t>(left, 1 << 30));
}

void close_fd(int& fd) {
    if (fd >= 0) ::close(fd);
    fd = -1;
}

// A socket closed when it goes out of scope unless released.
struct Socket {
    int fd = -1;
    explicit Socket(int f = -1) : fd(f) {}
    ~Socket() { close_fd(fd); }
    Socket(Socket&& other) noexcept : fd(other.release()) {}
    Socket(const Socket&) = delete;
    Socket& operator=(const Socket&) = delete;
    int release() { return std::exchange(fd, -1); }
};

void set_nonblocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL, 0) | O_NONBLOCK); }

void set_nodelay(int fd) {
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Waits until `fd` is ready for `events` or the deadline passes; false on timeout.
bool wait_ready(int fd, short events, Clock::time_point deadline) {
    while (true) {
        pollfd p{fd, events, 0};
        const int n = ::poll(&p, 1, remaining_ms(deadline));
        if (n > 0) return true;
        if (n == 0) return false;
        if (errno != EINTR) return false;
    }
}

// Moves exactly `bytes` over a non-blocking socket before the deadline; `what` names the other side.
void send_all(int fd, const void* data, size_t bytes, Clock::time_point deadline, const std::string& what) {
    const auto* p = static_cast<const uint8_t*>(data);
    while (bytes > 0) {
        const ssize_t n = ::send(fd, p, bytes, MSG_NOSIGNAL);
        if (n > 0) {
            p += n, bytes -= size_t(n);
            continue;
        }
        if (n < 0 && errno == EINTR) continue;
        SMOE_CHECK(n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK), Communication, "{}: the connection broke ({})",
                   what, std::strerror(errno));
        SMOE_CHECK(wait_ready(fd, POLLOUT, deadline), Communication, "{}: timed out sending", what);
    }
}

void recv_all(int fd, void* data, size_t bytes, Clock::time_point deadline, const std::string& what) {
    auto* p = static_cast<uint8_t*>(data);
    while (bytes > 0) {
        const ssize_t n = ::recv(fd, p, bytes, 0);
        if (n > 0) {
            p += n, bytes -= size_t(n);
            continue;
        }
        SMOE_CHECK(n != 0, Communication, "{}: the connection closed (the process stopped)", what);
        if (errno == EINTR) continue;
        SMOE_CHECK(errno == EAGAIN || errno == EWOULDBLOCK, Communication, "{}: the connection broke ({})", what,
                   std::strerror(errno));
        SMOE_CHECK(wait_ready(fd, POLLIN, deadline), Communication, "{}: timed out waiting", what);
    }
}

in_addr resolve_ipv4(const std::string& host) {
    addrinfo hints{};
    hints.ai_family = AF_INET;
    hints.ai_socktype = SOCK_STREAM;
    addrinfo* found = nullptr;
    const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
    SMOE_CHECK(rc == 0 && found, Communication, "MASTER_ADDR {}: cannot resolve it ({})", host, gai_strerror(rc));
    const in_addr a = reinterpret_cast<sockaddr_in*>(found->ai_addr)->sin_addr;
    freeaddrinfo(found);
    return a;
}

// A listening socket on `address`:`port` (port 0: any free port).
Socket listen_on(in_addr address, int port, const std::string& what) {
    Socket s(::socket(AF_INET, SOCK_STREAM, 0));
    SMOE_CHECK(s.fd >= 0, Communication, "{}: socket() failed ({})", what, std::strerror(errno));
    const int one = 1;
    setsockopt(s.fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr = address;
    a.sin_port = htons(uint16_t(port));
    SMOE_CHECK(::bind(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0, Communication, "{}: cannot listen on {}:{} ({})",
               what, inet_ntoa(address), port, std::strerror(errno));
    SMOE_CHECK(::listen(s.fd, 128) == 0, Communication, "{}: listen() failed ({})", what, std::strerror(errno));
    set_nonblocking(s.fd);
    return s;
}

int local_port(int fd) {
    sockaddr_in a{};
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    return ntohs(a.sin_port);
}

// Connects to address:port, retrying while nobody listens yet, until the deadline.
int dial(in_addr address, int port, Clock::time_point deadline, const std::string& what) {
    while (true) {
        Socket s(::socket(AF_INET, SOCK_STREAM, 0));
        SMOE_CHECK(s.fd >= 0, Communication, "{}: socket() failed ({})", what, std::strerror(errno));
        set_nonblocking(s.fd);
        sockaddr_in a{};
        a.sin_family = AF_INET;
        a.sin_addr = address;
        a.sin_port = htons(uint16_t(port));
        int rc = ::connect(s.fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
        if (rc != 0 && errno == EINPROGRESS && wait_ready(s.fd, POLLOUT, deadline)) {
            int err = 0;
            socklen_t len = sizeof err;
            getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &err, &len);
            rc = err == 0 ? 0 : -1;
            errno = err;
        }
        if (rc == 0) {
            set_nodelay(s.fd);
            return s.release();
        }
        SMOE_CHECK(Clock::now() < deadline, Communication, "{}: could not connect to {}:{} ({})", what, inet_ntoa(address),
                   port, std::strerror(errno));
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
}

// The first message on every connection: who is calling, and (to rank 0) where it listens.
struct Hello {
    uint32_t magic = kHelloMagic;
    int32_t rank = 0;
    int32_t size = 0;
    int32_t port = 0;
};

int env_int(const char* name, int low, int high) {
    const char* v = std::getenv(name);
    SMOE_CHECK(v && *v, InvalidArgument, "{} is not set (a torchrun-style launch sets RANK, WORLD_SIZE, MASTER_ADDR, "
               "MASTER_PORT)", name);
    char* end = nullptr;
    const long x = std::strtol(v, &end, 10);
    SMOE_CHECK(*end == '\0' && x >= low && x <= high, InvalidArgument, "{}='{}' is not an integer in [{}, {}]", name, v,
               low, high);
    return int(x);
}

}  // namespace

std::optional<TcpEndpoint> TcpEndpoint::from_environment() {
    if (!std::getenv("RANK") || !std::getenv("WORLD_SIZE")) return std::nullopt;
    TcpEndpoint e;
    e.size = env_int("WORLD_SIZE", 1, 1 << 16);
    e.rank = env_int("RANK", 0, e.size - 1);
    if (e.size == 1) return e;
    const char* addr = std::getenv("MASTER_ADDR");
    e.master_addr = addr && *addr ? addr : "127.0.0.1";
    e.master_port = env_int("MASTER_PORT", 1, 65535);
    return e;
}

TcpTransport::TcpTransport(const TcpEndpoint& e, std::chrono::milliseconds timeout)
    : rank_(e.rank), size_(e.size), timeout_(timeout), peers_(size_t(e.size), -1) {
    SMOE_CHECK(e.size >= 1 && e.rank >= 0 && e.rank < e.size, InvalidArgument, "rank {} of {} ranks", e.rank, e.size);
    if (size_ == 1) return;
    const auto deadline = Clock::now() + timeout_;
    const in_addr master = resolve_ipv4(e.master_addr);
    const std::string me = fmt::format("rank {}", rank_);
    try {
        std::vector<in_addr> address(size_t(size_), master);
        std::vector<int> port(size_t(size_), e.master_port);
        if (rank_ == 0) {
            Socket listener = listen_on(master, e.master_port, me);
            int joined = 0;
            while (joined < size_ - 1) {
                SMOE_CHECK(wait_ready(listener.fd, POLLIN, deadline), Communication,
                           "rank 0: rank(s) {} did not join at {}:{} within {} ms", unconnected_from(1), e.master_addr,
                           e.master_port, timeout_.count());
                sockaddr_in from{};
                socklen_t len = sizeof from;
                Socket c(::accept(listener.fd, reinterpret_cast<sockaddr*>(&from), &len));
                if (c.fd < 0) {  // a connection that went away, or no descriptors left for a moment
                    std::this_thread::sleep_for(std::chrono::milliseconds(5));
                    continue;
                }
                set_nonblocking(c.fd), set_nodelay(c.fd);
                // A connection that does not introduce itself properly and soon is dropped; the wait for
                // the real ranks goes on.
                Hello h;
                try {
                    recv_all(c.fd, &h, sizeof h, std::min(deadline, Clock::now() + kHelloWait), "rank 0: a joining rank");
                } catch (const Error&) {
                    continue;
                }
                if (h.magic != kHelloMagic || h.size != size_ || h.rank <= 0 || h.rank >= size_ ||
                    peers_[size_t(h.rank)] >= 0 || h.port <= 0 || h.port > 65535)
                    continue;
                address[size_t(h.rank)] = from.sin_addr;
                port[size_t(h.rank)] = h.port;
                peers_[size_t(h.rank)] = c.release();
                ++joined;
            }
            // Everyone's address, so the other ranks can connect among themselves.
            for (int r = 1; r < size_; ++r) {
                send_all(peers_[size_t(r)], address.data(), address.size() * sizeof(in_addr), deadline, fmt::format("rank 0 to rank {}", r));
                send_all(peers_[size_t(r)], port.data(), port.size() * sizeof(int), deadline, fmt::format("rank 0 to rank {}", r));
            }
            return;
        }

        Socket listener = listen_on(in_addr{htonl(INADDR_ANY)}, 0, me);
        peers_[0] = dial(master, e.master_port, deadline, fmt::format("{}: joining rank 0", me));
        const Hello hello{kHelloMagic, rank_, size_, local_port(listener.fd)};
        send_all(peers_[0], &hello, sizeof hello, deadline, fmt::format("{} to rank 0", me));
        recv_all(peers_[0], address.data(), address.size() * sizeof(in_addr), deadline, fmt::format("{} from rank 0", me));
        recv_all(peers_[0], port.data(), port.size() * sizeof(int), deadline, fmt::format("{} from rank 0", me));
        for (int r = 1; r < size_; ++r)
            SMOE_CHECK(port[size_t(r)] > 0 && port[size_t(r)] <= 65535, Communication, "{}: rank 0 sent port {} for rank {}",
                       me, port[size_t(r)], r);
        // The higher rank of each pair dials the lower one.
        for (int r = 1; r < rank_; ++r) {
            peers_[size_t(r)] = dial(address[size_t(r)], port[size_t(r)], deadline, fmt::format("{}: connecting to rank {}", me, r));
            send_all(peers_[size_t(r)], &hello, sizeof hello, deadline, fmt::format("{} to rank {}", me, r));
        }
        for (int pending = size_ - 1 - rank_; pending > 0;) {
            SMOE_CHECK(wait_ready(listener.fd, POLLIN, deadline), Communication, "{}: rank(s) {} did not connect within {} ms",
                       me, unconnected_from(rank_ + 1), timeout_.count());
            Socket c(::accept(listener.fd, nullptr, nullptr));
            if (c.fd < 0) {
                std::this_thread::sleep_for(std::chrono::milliseconds(5));
                continue;
            }
            set_nonblocking(c.fd), set_nodelay(c.fd);
            Hello h;
            try {
                recv_all(c.fd, &h, sizeof h, std::min(deadline, Clock::now() + kHelloWait), me);
            } catch (const Error&) {
                continue;
            }
            if (h.magic != kHelloMagic || h.size != size_ || h.rank <= rank_ || h.rank >= size_ || peers_[size_t(h.rank)] >= 0)
                continue;  // not one of the ranks this one waits for: dropped
            peers_[size_t(h.rank)] = c.release();
            --pending;
        }
    } catch (...) {
        for (int& fd : peers_) close_fd(fd);
        throw;
    }
}

std::string TcpTransport::unconnected_from(int first) const {
    std::vector<int> ranks;
    for (int r = first; r < size_; ++r)
        if (peers_[size_t(r)] < 0) ranks.push_back(r);
    return fmt::format("{}", fmt::join(ranks, ", "));
}

TcpTransport::~TcpTransport() {
    for (int& fd : peers_) close_fd(fd);
}

namespace {

// Every message starts with this header. An abort header (kAbortMagic) says the sender gave up on the
// group because of rank `round`; it is only ever sent between messages.
struct Header {
    uint32_t magic;
    uint32_t unused;
    uint64_t round;
    uint64_t bytes;
};

// Per peer, one collective: bytes sent and received so far, over header + payload.
struct Flow {
    Header out_header{}, in_header{};
    size_t sent = 0, got = 0;
    bool header_in = false;
    bool quiet = false;  // its message is in and nothing more is expected: stop listening
};

// The rank an abort header names as the culprit (possibly the receiver itself: its sender gave up on it), else
// -1 (not an abort, or a rank past the `size` ranks).
int abort_culprit(const Header& h, int size) {
    return h.magic == kAbortMagic && h.round < uint64_t(size) ? int(h.round) : -1;
}

// An abort header waiting at the front of `fd`'s incoming bytes: the culprit it names, else -1.
int peek_abort(int fd, int size) {
    Header h{};
    const ssize_t n = ::recv(fd, &h, sizeof h, MSG_PEEK | MSG_DONTWAIT);
    return n == ssize_t(sizeof h) ? abort_culprit(h, size) : -1;
}

}  // namespace

std::vector<Bytes> TcpTransport::all_to_all(std::vector<Bytes> send) {
    SMOE_CHECK(int(send.size()) == size_, InvalidArgument, "all_to_all: {} messages for {} ranks", send.size(), size_);
    SMOE_CHECK(size_ == 1 || peers_[size_t(rank_ == 0 ? 1 : 0)] >= 0, Communication,
               "rank {}: the transport broke in an earlier collective", rank_);
    const auto deadline = Clock::now() + timeout_;
    const uint64_t round = round_++;
    std::vector<Bytes> recv(static_cast<size_t>(size_));
    recv[size_t(rank_)] = std::move(send[size_t(rank_)]);
    std::vector<Flow> flow(static_cast<size_t>(size_));
    for (int p = 0; p < size_; ++p)
        flow[size_t(p)].out_header = {kMessageMagic, 0, round, uint64_t(send[size_t(p)].size())};
    auto out_total = [&](int p) { return sizeof(Header) + send[size_t(p)].size(); };
    auto in_total = [&](int p) { return sizeof(Header) + (flow[size_t(p)].header_in ? recv[size_t(p)].size() : 0); };
    auto in_done = [&](int p) { return flow[size_t(p)].header_in && flow[size_t(p)].got == in_total(p); };
    auto broken = [](int err) {
        return err == ECONNRESET || err == EPIPE
                   ? fmt::format("closed its connection (the process stopped: {})", std::strerror(err))
                   : fmt::format("broke its connection ({})", std::strerror(err));
    };

    // Sends, without waiting, what is left of this collective's message to peer p: 0, or the errno that
    // broke the connection.
    auto send_available = [&](int p) -> int {
        Flow& f = flow[size_t(p)];
        while (f.sent < out_total(p)) {
            const uint8_t* src = f.sent < sizeof(Header)
                                     ? reinterpret_cast<const uint8_t*>(&f.out_header) + f.sent
                                     : send[size_t(p)].data() + (f.sent - sizeof(Header));
            const size_t left = f.sent < sizeof(Header) ? sizeof(Header) - f.sent : out_total(p) - f.sent;
            const ssize_t put = ::send(peers_[size_t(p)], src, left, MSG_NOSIGNAL);
            if (put < 0) {
                if (errno == EINTR) continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) break;
                return errno;
            }
            f.sent += size_t(put);
        }
        return 0;
    };
    // Reads, without waiting, what peer p has sent of this collective's message until it is in or nothing
    // more is there; "" or why its connection failed. A header that is not this collective's message (an
    // abort, or damage) is left in `in_header`, not accepted, for the caller to judge.
    auto take_available = [&](int p) -> std::string {
        Flow& f = flow[size_t(p)];
        while (!in_done(p) && !(!f.header_in && f.got == sizeof(Header))) {
            uint8_t* dst = f.header_in ? recv[size_t(p)].data() + (f.got - sizeof(Header))
                                       : reinterpret_cast<uint8_t*>(&f.in_header) + f.got;
            const size_t want = f.header_in ? in_total(p) - f.got : sizeof(Header) - f.got;
            const ssize_t got = ::recv(peers_[size_t(p)], dst, want, MSG_DONTWAIT);
            if (got == 0) return "closed its connection (the process stopped)";
            if (got < 0) {
                if (errno == EINTR) continue;
                if (errno == EAGAIN || errno == EWOULDBLOCK) break;
                return broken(errno);
            }
            f.got += size_t(got);
            if (!f.header_in && f.got == sizeof(Header)) {
                const Header& h = f.in_header;
                if (h.magic != kMessageMagic || h.round != round || h.bytes > kMaxMessage) break;
                try {
                    recv[size_t(p)].resize(size_t(h.bytes));
                } catch (const std::bad_alloc&) {
                    return fmt::format("announced {} bytes, more than this process can hold", h.bytes);
                }
                f.header_in = true;
            }
        }
        return "";
    };

    // Gives up because of rank `culprit`: tells the other ranks who failed, then closes every connection, and
    // later collectives refuse at once. A rank part-way through this collective's message first gets the
    // rest, so that the abort arrives where a header is due. Meanwhile what the others send is read and
    // dropped, and each connection closes once its peer has closed it too, or after kAbortLinger: a
    // connection closed with bytes unread is reset, and a reset drops what this rank has queued and not yet
    // sent — the abort with it.
    // A culprit that only timed out may be alive and late: with `tell_culprit` it is told too, so that it can say
    // it came too late rather than blame this rank's closed connection.
    auto give_up = [&](int culprit, bool tell_culprit = false) {
        const Header abort{kAbortMagic, 0, uint64_t(culprit), 0};
        std::vector<size_t> abort_sent(static_cast<size_t>(size_), 0);
        if (!tell_culprit) close_fd(peers_[size_t(culprit)]);  // a culprit that closed: nothing to tell it
                                                                // (this rank's own entry is -1 already)
        const auto linger_end = Clock::now() + std::min<std::chrono::milliseconds>(timeout_, kAbortLinger);
        while (true) {
            std::vector<pollfd> fds;
            std::vector<int> who;
            for (int q = 0; q < size_; ++q) {
                if (q == rank_ || peers_[size_t(q)] < 0) continue;
                fds.push_back({peers_[size_t(q)],
                               short(POLLIN | (abort_sent[size_t(q)] < sizeof abort ? POLLOUT : 0)), 0});
                who.push_back(q);
            }
            if (fds.empty()) break;
            const int n = ::poll(fds.data(), nfds_t(fds.size()), remaining_ms(linger_end));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            for (size_t i = 0; i < fds.size(); ++i) {
                const int q = who[i];
                int& fd = peers_[size_t(q)];
                if (fds[i].revents & POLLNVAL) {
                    close_fd(fd);
                    continue;
                }
                if (fds[i].revents & POLLOUT) {
                    // The rest of a message begun (one not begun is left out), then the abort.
                    const size_t begun = flow[size_t(q)].sent;
                    int err = begun > 0 ? send_available(q) : 0;
                    while (!err && (begun == 0 || flow[size_t(q)].sent == out_total(q)) &&
                           abort_sent[size_t(q)] < sizeof abort) {
                        const ssize_t put =
                            ::send(fd, reinterpret_cast<const uint8_t*>(&abort) + abort_sent[size_t(q)],
                                   sizeof abort - abort_sent[size_t(q)], MSG_NOSIGNAL);
                        if (put > 0) {
                            abort_sent[size_t(q)] += size_t(put);
                        } else if (put < 0 && errno == EINTR) {
                            continue;
                        } else {  // -1: the socket is full for now
                            err = put < 0 && errno != EAGAIN && errno != EWOULDBLOCK ? errno : -1;
                        }
                    }
                    if (err > 0) {
                        close_fd(fd);
                        continue;
                    }
                    if (abort_sent[size_t(q)] == sizeof abort) ::shutdown(fd, SHUT_WR);
                }
                if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
                    uint8_t sink[1 << 16];
                    ssize_t got = 1;
                    for (int reads = 0; reads < 256 && got > 0; ++reads)
                        got = ::recv(fd, sink, sizeof sink, MSG_DONTWAIT);
                    if (got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
                        close_fd(fd);  // it closed
                }
            }
        }
        for (int& fd : peers_) close_fd(fd);  // those still open when the linger ends
    };
    // Rank `by` says rank `culprit` failed: pass it on and stop.
    auto reported = [&](int culprit, int by) {
        give_up(culprit);
        SMOE_THROW(Communication, "rank {}: rank {} stopped or failed in collective {} (reported by rank {})",
                   rank_, culprit, round, by);
    };
    // Before blaming a peer: whether another rank has already said who failed. A rank that gave up first may
    // have sent its message before its abort, and closed since: read what each rank has sent, so that an
    // abort behind a message not yet read is found too.
    // An abort that names this rank (its sender timed out waiting for it: this rank came too late) is said as
    // such, where no rank names another.
    auto find_report = [&] {
        int gave_up_on_this = -1;
        for (int q = 0; q < size_; ++q) {
            if (q == rank_ || peers_[size_t(q)] < 0) continue;
            (void)take_available(q);
            const Flow& f = flow[size_t(q)];
            int culprit = -1;
            if (!f.header_in && f.got == sizeof(Header)) culprit = abort_culprit(f.in_header, size_);
            if (in_done(q)) culprit = peek_abort(peers_[size_t(q)], size_);
            if (culprit == rank_ && gave_up_on_this < 0) gave_up_on_this = q;
            if (culprit >= 0 && culprit != rank_) reported(culprit, q);
        }
        if (gave_up_on_this >= 0) {
            give_up(gave_up_on_this);
            SMOE_THROW(Communication, "rank {}: rank {} gave up on this rank (timed out waiting for it, or lost its "
                       "connection) in collective {}", rank_, gave_up_on_this, round);
        }
    };
    // Peer p failed us (`why`) — unless another rank already told us who really failed.
    auto fail = [&](int p, const std::string& why) {
        find_report();
        give_up(p);
        SMOE_THROW(Communication, "rank {}: rank {} {} in collective {}", rank_, p, why, round);
    };

    try {
        while (true) {
            std::vector<pollfd> fds;
            std::vector<int> who;
            bool waiting = false;  // on anything this collective needs (not only on a peer's further words)
            for (int p = 0; p < size_; ++p) {
                if (p == rank_) continue;
                const Flow& f = flow[size_t(p)];
                short events = 0;
                if (f.sent < out_total(p)) events |= POLLOUT;
                if (!in_done(p) || !f.quiet) events |= POLLIN;
                waiting |= f.sent < out_total(p) || !in_done(p);
                if (events) fds.push_back({peers_[size_t(p)], events, 0}), who.push_back(p);
            }
            if (!waiting) break;
            const int n = ::poll(fds.data(), nfds_t(fds.size()), remaining_ms(deadline));
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) {
                std::vector<int> missing;
                for (int p = 0; p < size_; ++p)
                    if (p != rank_ && (flow[size_t(p)].sent < out_total(p) || !in_done(p)))
                        missing.push_back(p);
                find_report();
                give_up(missing.front(), true);
                SMOE_THROW(Communication, "rank {}: rank(s) {} did not complete collective {} within {} ms",
                           rank_, fmt::join(missing, ", "), round, timeout_.count());
            }
            for (size_t i = 0; i < fds.size(); ++i) {
                const int p = who[i];
                Flow& f = flow[size_t(p)];
                if (fds[i].revents & POLLNVAL) fail(p, "has no open connection here");
                if ((fds[i].revents & (POLLIN | POLLHUP | POLLERR)) && in_done(p)) {
                    // After its message: an abort naming who failed, the next collective's message (left
                    // for then), or its close (harmless unless we still owe it bytes).
                    const int culprit = peek_abort(fds[i].fd, size_);
                    if (culprit >= 0 && culprit != rank_) reported(culprit, p);
                    f.quiet = true;
                } else if (fds[i].revents & (POLLIN | POLLHUP | POLLERR)) {
                    // Read what is there: the header first, then the bytes it announces.
                    const std::string why = take_available(p);
                    if (!why.empty()) fail(p, why);
                    if (!f.header_in && f.got == sizeof(Header)) {
                        const Header& h = f.in_header;
                        const int culprit = abort_culprit(h, size_);
                        // In place of its message: who failed, or that it gave up on this rank.
                        if (culprit >= 0 && culprit != rank_) reported(culprit, p);
                        if (culprit == rank_)
                            fail(p, "gave up on this rank (timed out waiting for it, or lost its connection)");
                        fail(p, fmt::format("sent a malformed message (round {}, {} bytes)", h.round, h.bytes));
                    }
                }
                if (fds[i].revents & POLLOUT)
                    if (const int err = send_available(p)) fail(p, broken(err));
            }
        }
    } catch (const Error&) {
        throw;  // the connections are closed already
    } catch (...) {
        // This rank failed (out of memory, say): the others hear so, and no stream stays half-read.
        give_up(rank_);
        throw;
    }
    return recv;
}

}  // namespace steadymoe
