// A model directory as Hugging Face and DeepSeek ship it: config.json plus either model.safetensors or
// model.safetensors.index.json naming the shard that holds each tensor.
#pragma once

#include "steadymoe/model/config.hpp"
#include "steadymoe/model/safetensors.hpp"

#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace steadymoe {

class Checkpoint {
public:
    // Reads config.json and opens (validates) every shard. Throws NotFound / BadFormat naming the file.
    static Checkpoint open(const std::filesystem::path& dir);

    const std::filesystem::path& dir() const { return dir_; }
    const MoeConfig& config() const { return config_; }

    bool contains(const std::string& name) const;
    const TensorInfo* find(const std::string& name) const;
    // Throws NotFound: "tensor 'X' is not in checkpoint DIR".
    Tensor get(const std::string& name) const;
    // Every tensor name, sorted.
    std::vector<std::string> names() const;
    // The shard file names, in the order opened.
    std::vector<std::string> shard_files() const;

private:
    std::filesystem::path dir_;
    MoeConfig config_;
    std::vector<SafetensorsFile> shards_;
    std::map<std::string, size_t> shard_of_;  // tensor name -> index in shards_
};

}  // namespace steadymoe
