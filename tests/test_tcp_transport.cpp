// The TCP transport of torchrun-style launches, with its ranks as threads of this process on the
// loopback interface: every byte arrives where it was sent, in every round; a rank that never joins is
// named when the wait runs out; a rank that stops (closes its connections) is named at once, not after
// the timeout; the launch environment is read and checked.
#include "steadymoe/core/error.hpp"
#include "steadymoe/parallel/tcp_transport.hpp"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

using namespace steadymoe;
using namespace std::chrono_literals;

namespace {

// A port nobody listens on right now (the kernel's choice for a socket we close again).
int free_port() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = 0;
    ::bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
    socklen_t len = sizeof a;
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    ::close(fd);
    return ntohs(a.sin_port);
}

// Runs `body(rank)` for `ranks` threads; returns each rank's error message ("" when it returned).
std::vector<std::string> run_ranks(int ranks, const std::function<void(int)>& body) {
    std::vector<std::string> errors(static_cast<size_t>(ranks));
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r)
        threads.emplace_back([&, r] {
            try {
                body(r);
            } catch (const Error& e) {
                errors[size_t(r)] = e.what();
            }
        });
    for (std::thread& t : threads) t.join();
    return errors;
}

Bytes message(int from, int to, uint64_t round) {
    // Sizes differ per pair and round (empty included); contents name the pair and the position.
    const size_t n = size_t((from * 7 + to * 3 + round * 5) % 4) * 100000;
    Bytes b(n);
    for (size_t i = 0; i < n; ++i) b[i] = uint8_t(from * 31 + to * 17 + round + i);
    return b;
}

}  // namespace

TEST(TcpTransport, EveryRankGetsWhatEveryRankSentInEveryRound) {
    const int port = free_port(), ranks = 3;
    const auto errors = run_ranks(ranks, [&](int r) {
        TcpTransport t({r, ranks, "127.0.0.1", port}, 20s);
        ASSERT_EQ(t.rank(), r);
        ASSERT_EQ(t.size(), ranks);
        for (uint64_t round = 0; round < 4; ++round) {
            std::vector<Bytes> send;
            for (int d = 0; d < ranks; ++d) send.push_back(message(r, d, round));
            const std::vector<Bytes> got = t.all_to_all(std::move(send));
            ASSERT_EQ(got.size(), size_t(ranks));
            for (int s = 0; s < ranks; ++s) EXPECT_EQ(got[size_t(s)], message(s, r, round)) << s << " -> " << r;
        }
        const std::vector<Bytes> all = t.all_gather(Bytes{uint8_t(r)});
        for (int s = 0; s < ranks; ++s) EXPECT_EQ(all[size_t(s)], Bytes{uint8_t(s)});
    });
    for (const std::string& e : errors) EXPECT_EQ(e, "");
}

// Something else connecting to the master port — silent, or saying junk — is dropped; the ranks still meet.
TEST(TcpTransport, StrayConnectionsDoNotDisturbTheRendezvous) {
    const int port = free_port(), ranks = 2;
    auto connect_to_master = [&] {  // a fresh socket per attempt, until rank 0 listens
        for (int i = 0; i < 500; ++i) {
            const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
            sockaddr_in a{};
            a.sin_family = AF_INET;
            a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
            a.sin_port = htons(uint16_t(port));
            if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) return fd;
            ::close(fd);
            std::this_thread::sleep_for(10ms);
        }
        return -1;
    };
    std::thread stray([&] {
        const int silent = connect_to_master(), junk = connect_to_master();
        EXPECT_GE(silent, 0);
        EXPECT_GE(junk, 0);
        (void)::send(junk, "GET / HTTP/1.0\r\n\r\n", 18, MSG_NOSIGNAL);
        std::this_thread::sleep_for(300ms);
        ::close(silent), ::close(junk);
    });
    const auto errors = run_ranks(ranks, [&](int r) {
        if (r == 1) std::this_thread::sleep_for(500ms);  // the strays come first
        TcpTransport t({r, ranks, "127.0.0.1", port}, 20s);
        const std::vector<Bytes> got = t.all_to_all(std::vector<Bytes>(size_t(ranks), Bytes{uint8_t(r)}));
        for (int s = 0; s < ranks; ++s) EXPECT_EQ(got[size_t(s)], Bytes{uint8_t(s)});
    });
    stray.join();
    for (const std::string& e : errors) EXPECT_EQ(e, "");
}

TEST(TcpTransport, ARankThatNeverJoinsIsNamedWhenTheWaitRunsOut) {
    const int port = free_port();
    const auto t0 = std::chrono::steady_clock::now();
    const auto errors = run_ranks(2, [&](int r) { TcpTransport t({r, 3, "127.0.0.1", port}, 500ms); });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(errors[0].find("rank(s) 2 did not join"), std::string::npos) << errors[0];
    EXPECT_NE(errors[1], "");  // rank 1 loses rank 0, which gave up
    EXPECT_LT(seconds, 10.0);
}

// Rank 2 stops after collective 0; ranks 0 and 1 name it in collective 1 — from their own connection to it,
// or as the other survivor reports it. With messages of a few bytes and of 8 MB (more than a socket's buffers
// hold: the survivor that gives up first is part-way through its message to the other, whose abort must still
// arrive).
class TcpTransportStop : public ::testing::TestWithParam<size_t> {};

TEST_P(TcpTransportStop, ARankThatStopsIsNamedAtOnce) {
    const int port = free_port(), ranks = 3;
    const size_t bytes = GetParam();
    const auto t0 = std::chrono::steady_clock::now();
    const auto errors = run_ranks(ranks, [&](int r) {
        TcpTransport t({r, ranks, "127.0.0.1", port}, 30s);
        (void)t.all_to_all(std::vector<Bytes>(size_t(ranks), Bytes{1, 2, 3}));
        if (r == 2) return;  // stops: its connections close as the transport goes
        (void)t.all_to_all(std::vector<Bytes>(size_t(ranks), Bytes(bytes, uint8_t(r))));
    });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    for (int r : {0, 1}) {
        const std::string& e = errors[size_t(r)];
        EXPECT_TRUE(e.find("rank 2 closed its connection") != std::string::npos ||
                    e.find("rank 2 stopped or failed in collective 1 (reported by rank") != std::string::npos)
            << e;
    }
    EXPECT_EQ(errors[2], "");
    EXPECT_LT(seconds, 10.0);  // far below the 30 s timeout
}

INSTANTIATE_TEST_SUITE_P(MessageSizes, TcpTransportStop, ::testing::Values(size_t(2), size_t(8) << 20),
                         [](const ::testing::TestParamInfo<size_t>& i) {
                             return i.param < 1024 ? "Small" : "EightMegabytes";
                         });

TEST(TcpTransport, ARankThatStallsIsNamedWithinTheTimeout) {
    const int port = free_port(), ranks = 2;
    const auto errors = run_ranks(ranks, [&](int r) {
        TcpTransport t({r, ranks, "127.0.0.1", port}, 400ms);
        if (r == 1) {
            std::this_thread::sleep_for(1500ms);  // alive, connected, silent
            return;
        }
        (void)t.all_to_all(std::vector<Bytes>(size_t(ranks), Bytes{7}));
    });
    EXPECT_NE(errors[0].find("rank(s) 1 did not complete collective 0 within 400 ms"), std::string::npos) << errors[0];
}

// Rank 2 stops after collective 0; rank 1 sees it at once in collective 1, tells the others and closes. Rank 0 is
// still computing then (well inside the timeout) and starts collective 1 only after rank 1 has gone: it must
// still name rank 2 — through the abort rank 1 left queued, or rank 2's own closed connection — not rank 1.
TEST(TcpTransport, ARankThatComesLateHearsWhoFailed) {
    const int port = free_port(), ranks = 3;
    const auto errors = run_ranks(ranks, [&](int r) {
        TcpTransport t({r, ranks, "127.0.0.1", port}, 30s);
        (void)t.all_to_all(std::vector<Bytes>(size_t(ranks), Bytes{1}));
        if (r == 2) return;                               // stops: its connections close as the transport goes
        if (r == 0) std::this_thread::sleep_for(2500ms);  // computing while rank 1 gives up and closes
        (void)t.all_to_all(std::vector<Bytes>(size_t(ranks), Bytes{2}));
    });
    for (int r : {0, 1}) {
        const std::string& e = errors[size_t(r)];
        EXPECT_TRUE(e.find("rank 2 closed its connection") != std::string::npos ||
                    e.find("rank 2 stopped or failed in collective 1 (reported by rank") != std::string::npos)
            << e;
    }
}

// Rank 2 stalls in collective 1, and rank 0 computes past the timeout before it starts collective 1: rank 1 gives
// up on both, naming the first, rank 0, and closes. Rank 0 must hear that it came too late, not that rank 1
// closed its connection.
TEST(TcpTransport, ARankThatComesTooLateIsToldSo) {
    const int port = free_port(), ranks = 3;
    const auto errors = run_ranks(ranks, [&](int r) {
        TcpTransport t({r, ranks, "127.0.0.1", port}, 400ms);
        (void)t.all_to_all(std::vector<Bytes>(size_t(ranks), Bytes{1}));
        if (r == 2) {
            std::this_thread::sleep_for(4000ms);  // alive, connected, silent
            return;
        }
        if (r == 0) std::this_thread::sleep_for(2500ms);  // computing while rank 1 gives up and closes
        (void)t.all_to_all(std::vector<Bytes>(size_t(ranks), Bytes{2}));
    });
    EXPECT_NE(errors[1].find("rank(s) 0, 2 did not complete collective 1 within 400 ms"), std::string::npos) << errors[1];
    EXPECT_NE(errors[0].find("rank 1 gave up on this rank"), std::string::npos) << errors[0];
}

TEST(TcpEndpoint, ReadsAndChecksTheLaunchEnvironment) {
    unsetenv("RANK"), unsetenv("WORLD_SIZE"), unsetenv("MASTER_ADDR"), unsetenv("MASTER_PORT");
    EXPECT_FALSE(TcpEndpoint::from_environment().has_value());
    setenv("RANK", "1", 1), setenv("WORLD_SIZE", "4", 1), setenv("MASTER_ADDR", "10.1.2.3", 1),
        setenv("MASTER_PORT", "29500", 1);
    const std::optional<TcpEndpoint> e = TcpEndpoint::from_environment();
    ASSERT_TRUE(e.has_value());
    EXPECT_EQ(e->rank, 1);
    EXPECT_EQ(e->size, 4);
    EXPECT_EQ(e->master_addr, "10.1.2.3");
    EXPECT_EQ(e->master_port, 29500);
    setenv("RANK", "4", 1);
    try {
        (void)TcpEndpoint::from_environment();
        ADD_FAILURE() << "RANK=4 of 4 accepted";
    } catch (const Error& err) {
        EXPECT_NE(std::string(err.what()).find("RANK='4'"), std::string::npos) << err.what();
    }
    setenv("RANK", "0", 1), unsetenv("MASTER_PORT");
    try {
        (void)TcpEndpoint::from_environment();
        ADD_FAILURE() << "a missing MASTER_PORT accepted";
    } catch (const Error& err) {
        EXPECT_NE(std::string(err.what()).find("MASTER_PORT"), std::string::npos) << err.what();
    }
    unsetenv("RANK"), unsetenv("WORLD_SIZE"), unsetenv("MASTER_ADDR");
}
