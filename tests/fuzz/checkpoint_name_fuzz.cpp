// A checkpoint directory's name (what a listing of a shared directory shows, and what `latest`
// points to): a name either parses to a step whose name is exactly it, or is refused; a step's
// own name always parses back to that step.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "fuzz_check.h"
#include "hydro/checkpoint_dir.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string name(reinterpret_cast<const char*>(data), size);
  int64_t step = -1;
  if (hydro::CheckpointDir::parse_name(name, &step)) {
    FUZZ_CHECK(step >= 0);
    FUZZ_CHECK(hydro::CheckpointDir::name_for(step) == name);
  }
  if (size >= sizeof(int64_t)) {
    int64_t any = 0;
    std::memcpy(&any, data, sizeof any);
    if (any >= 0) {
      int64_t back = -1;
      FUZZ_CHECK(hydro::CheckpointDir::parse_name(hydro::CheckpointDir::name_for(any), &back) && back == any);
    }
  }
  return 0;
}
