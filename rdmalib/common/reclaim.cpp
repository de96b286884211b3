// Removing shared-memory files that processes which died without closing
// them left behind (Fabric::reclaim_stale of the libfabric backend, for the
// shm provider's regions in /dev/shm).
//
// A region in use is mapped by its owner for the endpoint's whole life (the
// provider closes the descriptor right after mmap), and by each peer that
// talks to it. So a file that no process maps and that has not changed for a
// while is garbage, whoever created it.
#include "common/reclaim.hpp"

#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <ctime>
#include <fstream>
#include <map>
#include <set>
#include <string>

namespace rdmalib::detail {

namespace {

/// "rdmalib-..." (rdmalib's listeners) or "<digits>:<digits>:<digits>" (the
/// provider's own endpoint names): nothing else in /dev/shm is touched.
bool looks_like_shm_region(const std::string &name) {
  if (name.rfind("rdmalib-", 0) == 0)
    return true;
  int fields = 0;
  bool digit = false;
  for (char ch : name) {
    if (std::isdigit(static_cast<unsigned char>(ch))) {
      digit = true;
    } else if (ch == ':' && digit) {
      ++fields;
      digit = false;
    } else {
      return false;
    }
  }
  return digit && fields == 2;
}

/// Every file directly in `dir` that some process has mapped (of the processes whose maps
/// this process may read: all of the same user, every one as root).
std::set<std::string> mapped_files_in(const std::string &dir) {
  std::set<std::string> out;
  DIR *proc = opendir("/proc");
  if (!proc)
    return out;
  const std::string marker = " " + dir;
  while (dirent *e = readdir(proc)) {
    if (!std::isdigit(static_cast<unsigned char>(e->d_name[0])))
      continue;
    // A process that exits while its maps are read only ends the loop: the
    // stream turns the kernel's ESRCH into badbit, and its mappings are gone.
    std::ifstream maps(std::string("/proc/") + e->d_name + "/maps");
    std::string line;
    while (maps && std::getline(maps, line)) {
      size_t at = line.find(marker);
      if (at == std::string::npos)
        continue;
      std::string name = line.substr(at + marker.size());
      if (name.find('/') != std::string::npos)
        continue;
      // A file unlinked while mapped shows as "name (deleted)": not in the
      // directory any more, so it cannot be a candidate anyway.
      out.insert(name);
    }
  }
  closedir(proc);
  return out;
}

} // namespace

Fabric::ReclaimReport reclaim_unmapped_regions(const std::string &dir_path,
                                               std::chrono::seconds min_age) {
  Fabric::ReclaimReport report;
  const std::string shm_dir =
      dir_path.empty() || dir_path.back() == '/' ? dir_path : dir_path + "/";
  try {
    DIR *dir = opendir(shm_dir.c_str());
    if (!dir)
      return report;
    std::map<std::string, uint64_t> candidates; // name -> size
    const uid_t me = geteuid();
    const time_t now = std::time(nullptr);
    while (dirent *e = readdir(dir)) {
      std::string name = e->d_name;
      if (!looks_like_shm_region(name))
        continue;
      struct stat st;
      if (lstat((shm_dir + name).c_str(), &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != me)
        continue;
      if (now - st.st_mtime < min_age.count() || now - st.st_ctime < min_age.count())
        continue;
      candidates.emplace(name, static_cast<uint64_t>(st.st_size));
    }
    closedir(dir);
    if (candidates.empty())
      return report;
    const std::set<std::string> mapped = mapped_files_in(shm_dir);
    for (const auto &[name, size] : candidates) {
      if (mapped.count(name))
        continue;
      const std::string path = shm_dir + name;
      if (unlink(path.c_str()) == 0) {
        report.names.push_back(path);
        report.bytes += size;
      }
    }
  } catch (...) {
    // Best effort by contract: a failure to inspect leaves things as they are.
  }
  return report;
}

} // namespace rdmalib::detail
