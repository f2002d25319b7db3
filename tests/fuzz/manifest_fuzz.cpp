// The checkpoint manifest (manifest.json, read from a shared disk): any text either parses, and
// then writes back to JSON that parses to the same manifest, or is refused with a message that
// names the file.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "hydro/manifest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  hydro::Manifest m;
  hydro::Status s = hydro::Manifest::parse(text, "fuzz/manifest.json", &m);
  if (!s.ok()) {
    FUZZ_CHECK(s.message().find("fuzz/manifest.json") != std::string::npos);
    return 0;
  }
  const std::string once = m.to_json();
  hydro::Manifest again;
  FUZZ_CHECK(hydro::Manifest::parse(once, "fuzz/again.json", &again).ok());
  FUZZ_CHECK(again.to_json() == once);
  return 0;
}
