#include "hydro/manifest.h"

#include <cinttypes>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "json_integers.h"

namespace hydro {
namespace {

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016" PRIx64, v);
  return buf;
}

bool parse_hex64(const std::string& s, uint64_t* out) {
  if (s.size() != 16) return false;
  char* end = nullptr;
  *out = std::strtoull(s.c_str(), &end, 16);
  return end == s.c_str() + s.size();
}

}  // namespace

// "model.pt", or one level down for a rank's shard: "rank-1/model.pt". No "", ".", "..", or
// hidden names but DCP's index at the top, so a manifest can never point outside its checkpoint.
bool Manifest::valid_file_name(const std::string& name) {
  size_t slash = name.find('/');
  auto ok = [](const std::string& part) { return !part.empty() && part[0] != '.'; };
  if (slash == std::string::npos) return ok(name) || name == kDcpMetadata;
  return ok(name.substr(0, slash)) && ok(name.substr(slash + 1)) && name.find('/', slash + 1) == std::string::npos;
}

bool Manifest::in_shard(const std::string& name, int rank) {
  const std::string dir = shard_dir(rank) + "/";
  return name.compare(0, dir.size(), dir) == 0;
}

bool Manifest::holds_shard(int rank) const {
  if (!sharded) return true;
  for (const auto& f : files)
    if (in_shard(f.name, rank)) return true;
  return false;
}

std::string Manifest::to_json() const {
  nlohmann::json j;
  j["format"] = kFormat;
  j["hydro_version"] = hydro_version;
  j["step"] = step;
  j["epoch"] = epoch;
  j["world_size"] = world_size;
  if (sharded) j["sharded"] = true;
  if (keep) j["keep"] = true;
  if (generation > 0) j["generation"] = generation;
  if (threads > 0) j["threads"] = threads;
  if (blas_threads > 0) j["blas_threads"] = blas_threads;
  if (!hosts.empty()) j["hosts"] = hosts;
  j["files"] = nlohmann::json::array();
  for (const auto& f : files) j["files"].push_back({{"name", f.name}, {"size", f.size}, {"xxh64", hex64(f.xxh64)}});
  return j.dump(2) + "\n";
}

Status Manifest::parse(const std::string& text, const std::string& where, Manifest* out) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return Status::corruption(where + ": not valid JSON");
  if (!only_whole_numbers(j))
    return Status::corruption(where + ": a number with a fraction, where hydro writes whole numbers");
  try {
    if (j.value("format", "") != kFormat) return Status::corruption(where + ": format is not " + std::string(kFormat));
    Manifest m;
    m.hydro_version = j.at("hydro_version").get<std::string>();
    m.step = j.at("step").get<int64_t>();
    m.epoch = j.at("epoch").get<int64_t>();
    m.world_size = j.at("world_size").get<int>();
    m.keep = j.value("keep", false);
    m.sharded = j.value("sharded", false);
    m.generation = j.value("generation", int64_t{0});
    m.threads = j.value("threads", 0);
    m.blas_threads = j.value("blas_threads", 0);
    m.hosts = j.value("hosts", std::vector<std::string>{});
    for (const auto& f : j.at("files")) {
      ManifestFile mf;
      mf.name = f.at("name").get<std::string>();
      mf.size = f.at("size").get<uint64_t>();
      if (!parse_hex64(f.at("xxh64").get<std::string>(), &mf.xxh64))
        return Status::corruption(where + ": bad xxh64 for " + mf.name);
      if (!valid_file_name(mf.name)) return Status::corruption(where + ": bad file name '" + mf.name + "'");
      m.files.push_back(std::move(mf));
    }
    *out = std::move(m);
  } catch (const nlohmann::json::exception& e) {
    return Status::corruption(where + ": " + e.what());
  }
  return Status::OK();
}

}  // namespace hydro
