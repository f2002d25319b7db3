// A stand-in for one kernel file, in the Debian 13 tier's root only (scripts/debian13), where no
// real one can be had: this machine's kernel has cgroup v1 hierarchies mounted by its host (the
// other tiers' Slurm 22.05 runs on them), so /proc/PID/cgroup lists them before cgroup v2's
// "0::" line, and Slurm's cgroup/v2 plugin stops with "Hybrid mode is not supported". Preloaded
// into every process of the root (/etc/ld.so.preload), open() of /proc/self/cgroup or
// /proc/PID/cgroup gives only the "0::" line, as on a node that mounts cgroup v2 alone. Every
// cgroup file Slurm and the tests read or write (cgroup.procs, cgroup.freeze, ...) stays the
// kernel's own.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

static int is_proc_cgroup(const char* path) {
  if (!path || strncmp(path, "/proc/", 6) != 0) return 0;
  const char* p = path + 6;
  if (strncmp(p, "self/", 5) == 0) {
    p += 5;
  } else {
    if (*p < '0' || *p > '9') return 0;
    while (*p >= '0' && *p <= '9') ++p;
    if (*p++ != '/') return 0;
  }
  return strcmp(p, "cgroup") == 0;
}

// The kernel's file, its "0::" line alone, in a memory file read from its start.
static int unified_view(int real) {
  char buf[8192];
  ssize_t n = 0, r;
  while (n < (ssize_t)sizeof buf - 1 && (r = read(real, buf + n, sizeof buf - 1 - n)) > 0) n += r;
  close(real);
  buf[n] = '\0';
  int fd = memfd_create("hydro-cgroup-view", MFD_CLOEXEC);
  if (fd < 0) return -1;
  const char* line = strstr(buf, "\n0::");
  line = line ? line + 1 : (strncmp(buf, "0::", 3) == 0 ? buf : NULL);
  if (line) {
    const char* end = strchr(line, '\n');
    size_t len = end ? (size_t)(end - line + 1) : strlen(line);
    if (write(fd, line, len) != (ssize_t)len) {
      close(fd);
      return -1;
    }
  }
  lseek(fd, 0, SEEK_SET);
  return fd;
}

static int opened(int fd, const char* path) { return fd >= 0 && is_proc_cgroup(path) ? unified_view(fd) : fd; }

#define OPEN_LIKE(name)                                                   \
  int name(const char* path, int flags, ...) {                            \
    static int (*real)(const char*, int, ...);                            \
    if (!real) real = (int (*)(const char*, int, ...))dlsym(RTLD_NEXT, #name); \
    va_list ap;                                                           \
    va_start(ap, flags);                                                  \
    mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0; \
    va_end(ap);                                                           \
    return opened(real(path, flags, mode), path);                         \
  }
OPEN_LIKE(open)
OPEN_LIKE(open64)

int openat(int dirfd, const char* path, int flags, ...) {
  static int (*real)(int, const char*, int, ...);
  if (!real) real = (int (*)(int, const char*, int, ...))dlsym(RTLD_NEXT, "openat");
  va_list ap;
  va_start(ap, flags);
  mode_t mode = (flags & (O_CREAT | O_TMPFILE)) ? va_arg(ap, mode_t) : 0;
  va_end(ap);
  return opened(real(dirfd, path, flags, mode), path);
}

FILE* fopen(const char* path, const char* how) {
  static FILE* (*real)(const char*, const char*);
  if (!real) real = (FILE * (*)(const char*, const char*)) dlsym(RTLD_NEXT, "fopen");
  if (!is_proc_cgroup(path)) return real(path, how);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  return fd < 0 ? NULL : fdopen(fd, "r");
}
