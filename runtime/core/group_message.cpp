#include "group_message.h"

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
  if (j.is_discarded() || !j.is_object()) return false;
  const auto code = j.find("code"), message = j.find("message");
  if (code == j.end() || !code->is_string() || message == j.end() || !message->is_string()) return false;
  Code c;
  if (!code_from_token(code->get<std::string>(), &c)) return false;
  *status = Status::with_code(c, message->get<std::string>());
  if (body) *body = j.value("body", nlohmann::json());
  return true;
}

}  // namespace hydro
