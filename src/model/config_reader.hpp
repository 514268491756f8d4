// Internal to the library: the JSON half of MoeConfig, kept apart from validation and describe() so each
// file has one job. MoeConfig::from_json_text / from_file are the public entry points.
#pragma once

#include "steadymoe/model/config.hpp"

#include <filesystem>
#include <string>

namespace steadymoe::config_reader {

// Parses config.json text (Hugging Face, or DeepSeek's V4 inference config) and maps its fields to a
// MoeConfig, applying each family's defaults. Throws Error naming `origin` for malformed JSON, wrong
// field types, missing required fields and unsupported values; does not run MoeConfig validation.
MoeConfig read_json_text(const std::string& text, const std::string& origin);

// Reads a whole config file (size-capped); NotFound / Io / BadFormat errors name the path.
std::string read_config_file(const std::filesystem::path& path);

}  // namespace steadymoe::config_reader
