// The watchdog FIFO's records (a line any process of the job may write): a line either parses,
// and then formats back to a line that parses to the same request, or is refused with a message
// that says it is a watchdog request.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "hydro/timer_table.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string line(reinterpret_cast<const char*>(data), size);
  hydro::TimerRequest r;
  hydro::Status s = hydro::parse_timer_request(line, &r);
  if (!s.ok()) {
    FUZZ_CHECK(s.message().find("watchdog request") != std::string::npos);
    return 0;
  }
  const std::string once = hydro::format_timer_request(r);
  hydro::TimerRequest again;
  FUZZ_CHECK(hydro::parse_timer_request(once, &again).ok());
  FUZZ_CHECK(hydro::format_timer_request(again) == once);
  FUZZ_CHECK(again.pid == r.pid && again.scope_id == r.scope_id && again.signal == r.signal);
  return 0;
}
