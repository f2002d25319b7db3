// The fork guard (fork_guard.c): CPython's thread-state list lock held across fork(), so that a
// forked child never starts with it held (python/cpython#112275, before CPython 3.12).
#pragma once

#ifdef __cplusplus
extern "C" {
#endif

enum {
  HYDRO_FORK_GUARD_ON = 0,          // installed: every fork() holds the lock
  HYDRO_FORK_GUARD_NOT_NEEDED = 1,  // a CPython without the bug: 3.12 and later, 3.11.10, ...
  HYDRO_FORK_GUARD_LAYOUT = 2,      // _PyRuntime is not laid out as this build's headers say: not installed
  HYDRO_FORK_GUARD_NO_ATFORK = 3,   // pthread_atfork failed: not installed
};

// Installs the pthread_atfork handlers (once; later calls return the same). With the GIL.
int hydro_fork_guard_install(void);
// Tests: 0 makes the installed handlers do nothing, 1 puts them back.
void hydro_fork_guard_set(int on);
// Tests: a new thread takes the lock, without the GIL, and lets it go once a fork waits for it (the
// guard) or has forked (no guard), or MAX_MS later; returns once it holds it (0), or -1 where the
// lock cannot be reached (CPython 3.12 or later).
int hydro_fork_guard_test_hold(unsigned max_ms);
// Tests: waits until that thread let the lock go; 1 when a fork had waited for it.
int hydro_fork_guard_test_join(void);

#ifdef __cplusplus
}
#endif
