// What one rank tells the others through the rank store: a typed message, never an in-band
// marker. Each is JSON {"code": "<code>", "message": "...", "body": <JSON>}: a failure travels
// with its code (a peer's durability_uncertain stays that), and a text that is not a message is an
// error of its own, not a value.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "hydro/checkpoint_group.h"
#include "hydro/manifest.h"
#include "hydro/status.h"

namespace hydro {

std::string encode_message(const Status& status, const nlohmann::json& body = nullptr);

// False when `text` is not a message. Otherwise *status is the sender's, and *body what it sent.
bool decode_message(const std::string& text, Status* status, nlohmann::json* body);

// The bodies: a rank's durable shard (the committer it answers, its host, its files) ...
nlohmann::json files_json(int committer, const std::string& host, const std::vector<ManifestFile>& files);
bool parse_files(const nlohmann::json& j, int* committer, std::string* host, std::vector<ManifestFile>* files);
// ... the checkpoints a rank can resume from ...
nlohmann::json offer_json(const ResumeOffer& o, const std::string& host);
bool parse_offer(const nlohmann::json& j, ResumeOffer* o, std::string* host);
// ... and a number (the vote's tally), or Code::corruption naming `from`.
Status body_int(const nlohmann::json& body, const std::string& from, int64_t* out);

}  // namespace hydro
