// A checkpoint directory: config.json plus its safetensors shards, all opened and cross-checked up front.
//
// Which files hold the weights, in order of preference:
//   1. model.safetensors.index.json: its "weight_map" names the shard of every tensor;
//   2. model.safetensors;
//   3. every *.safetensors file in the directory, in name order (for hand-made directories).
// Prefer 1 or 2: rule 3 also picks up unrelated safetensors files that happen to sit beside the model.
#include "steadymoe/model/checkpoint.hpp"

#include "steadymoe/core/files.hpp"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

namespace steadymoe {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kIndexFile = "model.safetensors.index.json";
constexpr const char* kSingleFile = "model.safetensors";
// An index lists one line per tensor; even the largest models stay far below this.
constexpr uint64_t kMaxIndexBytes = 256ull << 20;


// A shard must be a plain file name inside the checkpoint directory: an index that could point at
// "../x" or "/etc/x" would let a downloaded checkpoint make us read files outside it.
void check_shard_name(const std::string& shard, const std::string& tensor, const fs::path& index) {
    const bool plain = !shard.empty() && shard != "." && shard != ".." &&
                       shard.find('/') == std::string::npos && shard.find('\\') == std::string::npos &&
                       shard.find('\0') == std::string::npos;
    SMOE_CHECK(plain, BadFormat,
               "{}: tensor '{}' maps to shard '{}', which is not a file name in this directory",
               index.string(), tensor, shard);
}

// The index's weight_map: tensor name -> shard file name.
std::map<std::string, std::string> read_weight_map(const fs::path& index) {
    json doc;
    try {
        doc = json::parse(read_file_text(index, kMaxIndexBytes));
    } catch (const json::exception& e) {
        SMOE_THROW(BadFormat, "{}: not valid JSON ({})", index.string(), e.what());
    }
    SMOE_CHECK(doc.is_object(), BadFormat, "{}: expected a JSON object", index.string());
    const auto it = doc.find("weight_map");
    SMOE_CHECK(it != doc.end(), BadFormat, "{}: no \"weight_map\"", index.string());
    SMOE_CHECK(it->is_object(), BadFormat, "{}: \"weight_map\" is a JSON {}, expected an object",
               index.string(), it->type_name());
    std::map<std::string, std::string> map;
    for (const auto& [tensor, shard] : it->items()) {
        SMOE_CHECK(shard.is_string(), BadFormat,
                   "{}: weight_map entry for '{}' is a JSON {}, expected a file name", index.string(), tensor,
                   shard.type_name());
        check_shard_name(shard.get<std::string>(), tensor, index);
        map.emplace(tensor, shard.get<std::string>());
    }
    return map;
}

// Every *.safetensors file directly in `dir`, sorted by name.
std::vector<std::string> list_safetensors(const fs::path& dir) {
    std::vector<std::string> files;
    for (const fs::directory_entry& e : fs::directory_iterator(dir)) {
        if (e.is_regular_file() && e.path().extension() == ".safetensors")
            files.push_back(e.path().filename());
    }
    std::sort(files.begin(), files.end());
    return files;
}

}  // namespace

Checkpoint Checkpoint::open(const fs::path& dir) {
    std::error_code ec;
    SMOE_CHECK(fs::is_directory(dir, ec), NotFound,
               "checkpoint directory {} does not exist or is not a directory", dir.string());
    const fs::path config_path = dir / "config.json";
    SMOE_CHECK(fs::exists(config_path, ec), NotFound, "checkpoint {} has no config.json", dir.string());

    Checkpoint ckpt;
    ckpt.dir_ = dir;
    ckpt.config_ = MoeConfig::from_file(config_path);

    const fs::path index_path = dir / kIndexFile;
    std::map<std::string, std::string> weight_map;
    std::vector<std::string> files;
    if (fs::exists(index_path, ec)) {
        weight_map = read_weight_map(index_path);
        std::set<std::string> distinct;
        for (const auto& [tensor, shard] : weight_map) {
            if (!distinct.insert(shard).second) continue;
            SMOE_CHECK(fs::exists(dir / shard, ec), NotFound,
                       "{}: shard '{}' (holding tensor '{}') does not exist", index_path.string(), shard,
                       tensor);
        }
        files.assign(distinct.begin(), distinct.end());
    } else if (fs::exists(dir / kSingleFile, ec)) {
        files.push_back(kSingleFile);
    } else {
        files = list_safetensors(dir);
        SMOE_CHECK(!files.empty(), NotFound, "checkpoint {} has no {}, {} or other *.safetensors file",
                   dir.string(), kIndexFile, kSingleFile);
    }

    for (const std::string& file : files) {
        ckpt.shards_.push_back(SafetensorsFile::open(dir / file));
        const size_t shard = ckpt.shards_.size() - 1;
        for (const TensorInfo& t : ckpt.shards_.back().tensors()) {
            const auto [it, fresh] = ckpt.shard_of_.emplace(t.name, shard);
            SMOE_CHECK(fresh, BadFormat, "checkpoint {}: tensor '{}' is in both {} and {}", dir.string(),
                       t.name, files[it->second], file);
        }
    }

    // The index must agree with the shards: a name mapped to a shard that lacks it is a broken download
    // or a stale index, and would otherwise surface much later as a missing weight.
    for (const auto& [tensor, shard] : weight_map) {
        const auto it = ckpt.shard_of_.find(tensor);
        SMOE_CHECK(it != ckpt.shard_of_.end() && files[it->second] == shard, BadFormat,
                   "{}: maps tensor '{}' to {}, but {} has no such tensor", index_path.string(), tensor,
                   shard, shard);
    }
    return ckpt;
}

bool Checkpoint::contains(const std::string& name) const { return shard_of_.count(name) != 0; }

const TensorInfo* Checkpoint::find(const std::string& name) const {
    const auto it = shard_of_.find(name);
    return it == shard_of_.end() ? nullptr : shards_[it->second].find(name);
}

Tensor Checkpoint::get(const std::string& name) const {
    const auto it = shard_of_.find(name);
    SMOE_CHECK(it != shard_of_.end(), NotFound, "tensor '{}' is not in checkpoint {}", name, dir_.string());
    return shards_[it->second].get(name);
}

std::vector<std::string> Checkpoint::names() const {
    std::vector<std::string> out;
    out.reserve(shard_of_.size());
    for (const auto& [name, shard] : shard_of_) out.push_back(name);  // a std::map: already sorted
    return out;
}

std::vector<std::string> Checkpoint::shard_files() const {
    std::vector<std::string> out;
    out.reserve(shards_.size());
    for (const SafetensorsFile& s : shards_) out.push_back(fs::path(s.origin()).filename());
    return out;
}

}  // namespace steadymoe
