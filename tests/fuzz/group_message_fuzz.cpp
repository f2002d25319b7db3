// What one rank tells the others through the store (bytes a peer wrote): a message either decodes,
// and then encodes back to a message that decodes the same, or is refused. Its bodies (a rank's
// durable files, a resume offer) either parse and round-trip, or are refused.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_check.h"
#include "group_message.h"

using nlohmann::json;

namespace {

void check_bodies(const json& body) {
  int committer = 0;
  std::string host;
  std::vector<hydro::ManifestFile> files;
  if (hydro::parse_files(body, &committer, &host, &files)) {
    const json again = hydro::files_json(committer, host, files);
    int c2 = 0;
    std::string h2;
    std::vector<hydro::ManifestFile> f2;
    FUZZ_CHECK(hydro::parse_files(again, &c2, &h2, &f2));
    FUZZ_CHECK(hydro::files_json(c2, h2, f2) == again);
  }
  hydro::ResumeOffer offer;
  if (hydro::parse_offer(body, &offer, &host)) {
    const json again = hydro::offer_json(offer, host);
    hydro::ResumeOffer o2;
    std::string h2;
    FUZZ_CHECK(hydro::parse_offer(again, &o2, &h2));
    FUZZ_CHECK(hydro::offer_json(o2, h2) == again);
  }
  int64_t n = 0;
  hydro::Status s = hydro::body_int(body, "fuzz", &n);
  FUZZ_CHECK(s.ok() || s.message().find("fuzz") != std::string::npos);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  hydro::Status status;
  json body;
  if (!hydro::decode_message(text, &status, &body)) return 0;
  const std::string once = hydro::encode_message(status, body);
  hydro::Status s2;
  json b2;
  FUZZ_CHECK(hydro::decode_message(once, &s2, &b2));
  FUZZ_CHECK(s2.code() == status.code() && s2.message() == status.message() && b2 == body);
  check_bodies(body);
  return 0;
}
