#include "group_message.h"

#include <set>

#include "json_integers.h"

namespace hydro {

std::string encode_message(const Status& status, const nlohmann::json& body) {
  nlohmann::json j;
  j["code"] = code_token(status.code());
  j["message"] = status.message();
  j["body"] = body;
  return j.dump();
}

bool decode_message(const std::string& text, Status* status, nlohmann::json* body) {
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object() || !only_whole_numbers(j)) return false;
  const auto code = j.find("code"), message = j.find("message");
  if (code == j.end() || !code->is_string() || message == j.end() || !message->is_string()) return false;
  Code c;
  if (!code_from_token(code->get<std::string>(), &c)) return false;
  *status = Status::with_code(c, message->get<std::string>());
  if (body) *body = j.value("body", nlohmann::json());
  return true;
}

nlohmann::json files_json(int committer, const std::string& host, const std::vector<ManifestFile>& files) {
  nlohmann::json j;
  j["committer"] = committer;
  j["host"] = host;
  j["files"] = nlohmann::json::array();
  for (const auto& f : files) j["files"].push_back({f.name, f.size, f.xxh64});
  return j;
}

bool parse_files(const nlohmann::json& j, int* committer, std::string* host, std::vector<ManifestFile>* files) {
  try {
    *committer = j.at("committer").get<int>();
    *host = j.at("host").get<std::string>();
    for (const auto& f : j.at("files"))
      files->push_back({f.at(0).get<std::string>(), f.at(1).get<uint64_t>(), f.at(2).get<uint64_t>()});
  } catch (const nlohmann::json::exception&) {
    return false;
  }
  return true;
}

nlohmann::json offer_json(const ResumeOffer& o, const std::string& host) {
  return {{"steps", o.loadable}, {"host", host}, {"newest_seen", o.newest_seen}, {"newest_hosts", o.newest_hosts}};
}

bool parse_offer(const nlohmann::json& j, ResumeOffer* o, std::string* host) {
  try {
    o->loadable = j.at("steps").get<std::set<int64_t>>();
    *host = j.at("host").get<std::string>();
    o->newest_seen = j.at("newest_seen").get<int64_t>();
    o->newest_hosts = j.at("newest_hosts").get<std::vector<std::string>>();
  } catch (const nlohmann::json::exception&) {
    return false;
  }
  return true;
}

// A number a peer published, or Code::corruption naming it.
Status body_int(const nlohmann::json& body, const std::string& from, int64_t* out) {
  if (!body.is_number_integer()) return Status::corruption(from + " sent no number");
  *out = body.get<int64_t>();
  return Status::OK();
}

}  // namespace hydro
