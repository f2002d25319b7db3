// stand_in_device.h's device as a library that a Python test loads (ctypes) into its process,
// where hydro._C uses the same libhydro: test_device_resume.py's saves and resumes then copy the
// double tensors through hydro's slots as they would a device's (issue 58; no GPU is in CI).
#include <cstring>

#include "stand_in_device.h"

namespace {
hydro::test::StandInDevice* g_device = nullptr;
}  // namespace

extern "C" {

// The stand-in for every TensorPool made from now on (a Runtime's), with its counts at zero. An
// earlier one stays (a pool not yet freed may still call it).
void hydro_stand_in_on() {
  g_device = new hydro::test::StandInDevice;
  hydro::set_device_calls_for_tests([] { return g_device->calls(); });
}

// The build's own calls again, for the pools made from now on.
void hydro_stand_in_off() { hydro::set_device_calls_for_tests(nullptr); }

// "pins", "queued" or "waited": the stand-in's count since hydro_stand_in_on(); -1 for another.
int hydro_stand_in_count(const char* what) {
  if (g_device == nullptr) return 0;
  std::lock_guard<std::mutex> lock(g_device->mu);
  if (std::strcmp(what, "pins") == 0) return g_device->pins;
  if (std::strcmp(what, "queued") == 0) return g_device->queued;
  if (std::strcmp(what, "waited") == 0) return g_device->waited;
  return -1;
}

// The stand-in's copy number `copy` (of those waited for together) fails its wait, once.
void hydro_stand_in_fail_wait(int copy) {
  std::lock_guard<std::mutex> lock(g_device->mu);
  g_device->fail_wait = copy;
}
}
