// HYDRO_SIGNALS (a user's variable, the admin's YAML): any spec either parses into a map whose
// signals are real ones, whose sender signals are its own, and whose held set never holds SIGTERM
// or SIGINT, or is refused with a message that names the setting.
#include <signal.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_check.h"
#include "hydro/signal_map.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string spec(reinterpret_cast<const char*>(data), size);
  hydro::SignalMap map;
  hydro::Status s = hydro::SignalMap::parse(spec, "HYDRO_SIGNALS", &map);
  if (!s.ok()) {
    FUZZ_CHECK(s.message().find("HYDRO_SIGNALS") != std::string::npos);
    return 0;
  }
  for (const auto& [signo, action] : map.entries()) {
    FUZZ_CHECK(signo > 0 && signo < NSIG && signo != SIGKILL && signo != SIGSTOP);
    hydro::Action found{};
    FUZZ_CHECK(map.lookup(signo, &found) && found == action);
  }
  for (hydro::Action a :
       {hydro::Action::pause, hydro::Action::resume, hydro::Action::checkpoint_exit, hydro::Action::checkpoint}) {
    const int sender = map.signal_for(a);
    hydro::Action found{};
    FUZZ_CHECK(sender == 0 || (map.lookup(sender, &found) && found == a));
  }
  const sigset_t held = map.blocked_until_handled();
  FUZZ_CHECK(!sigismember(&held, SIGTERM) && !sigismember(&held, SIGINT));
  return 0;
}
