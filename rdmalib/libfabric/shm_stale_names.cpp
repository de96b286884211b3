// Quirks::closed_names_stay_local, see shm_stale_names.hpp and
// docs/BACKEND-BUGS.md ("every endpoint leaves its name on the heap").
#include "shm_stale_names.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <unordered_map>

namespace rdmalib::lf {

namespace {

/// The range where the provider believes a closed endpoint of this process
/// still is, and what rdmalib mapped there last.
struct Retired {
  uintptr_t start = 0;
  size_t length = 0;
  bool usable = false; // the range is reserved; false: connections are refused
  size_t mapped = 0;   // bytes of a live region mapped at `start` (0: none)
  dev_t dev = 0;       // ... and which file that region is
  ino_t ino = 0;
};

struct Registry {
  std::mutex m;
  std::unordered_map<std::string, Retired> names;
};

// Leaked on purpose: a listener owned by a static object may close after a
// function-local static would be destroyed.
Registry &registry() {
  static auto *r = new Registry;
  return *r;
}

} // namespace

MappedRange provider_mapping(const std::string &name) {
  std::ifstream maps("/proc/self/maps");
  const std::string suffix = " /dev/shm/" + name;
  MappedRange found;
  int count = 0;
  std::string line;
  while (std::getline(maps, line)) {
    if (line.size() < suffix.size() ||
        line.compare(line.size() - suffix.size(), suffix.size(), suffix) != 0)
      continue;
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) != 2 || hi <= lo)
      continue;
    found = MappedRange{lo, hi - lo};
    ++count;
  }
  return count == 1 ? found : MappedRange{};
}

void retire_named_region(const std::string &name, const MappedRange &where) noexcept {
  try {
    Registry &r = registry();
    std::lock_guard<std::mutex> g(r.m);
    if (r.names.count(name))
      return; // the provider's lookup finds the first endpoint of a name only
    Retired e;
    e.start = where.start;
    e.length = where.length;
    if (where.length) {
      void *want = reinterpret_cast<void *>(where.start);
      void *p = mmap(want, where.length, PROT_NONE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
      if (p == want)
        e.usable = true;
      else if (p != MAP_FAILED)
        munmap(p, where.length); // taken as a hint: the range was not free
    }
    r.names.emplace(name, e);
  } catch (...) {
    // Out of memory for one registry entry: a later connect to this name
    // from this process is then not protected.
  }
}

bool refresh_retired_name(const std::string &name, std::string &why) noexcept {
  Registry &r = registry();
  std::lock_guard<std::mutex> g(r.m);
  auto it = r.names.find(name);
  if (it == r.names.end())
    return true;
  Retired &e = it->second;
  if (!e.usable) {
    why = "the address range of this process's earlier endpoint of that name could not be "
          "kept, and shm would reach that closed endpoint instead";
    return false;
  }
  int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0)
    return errno == ENOENT; // nothing carries the name: the connect says so
  struct stat st {};
  if (fstat(fd, &st) != 0 || st.st_size <= 0 || static_cast<size_t>(st.st_size) > e.length) {
    ::close(fd);
    why = "its region (" + std::to_string(st.st_size) + " bytes) does not fit where shm keeps " +
          "the closed endpoint of that name this process had (" + std::to_string(e.length) +
          " bytes)";
    return false;
  }
  const size_t size = static_cast<size_t>(st.st_size);
  if (e.mapped == size && e.dev == st.st_dev && e.ino == st.st_ino) {
    ::close(fd);
    return true; // that region is already there
  }
  // MAP_FIXED replaces what is in the range in one step: a thread reading
  // the previous region there sees either it or the new one, never a hole.
  void *want = reinterpret_cast<void *>(e.start);
  void *p = mmap(want, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
  const int err = errno;
  ::close(fd);
  if (p != want) {
    // The range's contents are unknown now: refuse this name from here on.
    e.usable = false;
    why = std::string("cannot map its region where shm looks for it: ") + std::strerror(err);
    return false;
  }
  if (e.mapped > size)
    mmap(reinterpret_cast<uint8_t *>(want) + size, e.mapped - size, PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
  e.mapped = size;
  e.dev = st.st_dev;
  e.ino = st.st_ino;
  return true;
}

} // namespace rdmalib::lf
