// What one rank tells the others through the rank store: a typed message, never an in-band
// marker. Each is JSON {"code": "<code>", "message": "...", "body": <JSON>}: a failure travels
// with its code (a peer's durability_uncertain stays that), and a text that is not a message is an
// error of its own, not a value.
#pragma once

#include <nlohmann/json.hpp>

#include <string>

#include "hydro/status.h"

namespace hydro {

std::string encode_message(const Status& status, const nlohmann::json& body = nullptr);

// False when `text` is not a message. Otherwise *status is the sender's, and *body what it sent.
bool decode_message(const std::string& text, Status* status, nlohmann::json* body);

}  // namespace hydro
