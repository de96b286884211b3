#include "executor/function_library.hpp"

#include <cxxabi.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "executor/elf_symbols.hpp"
#include "protocol/protocol.hpp"

namespace rfaas::executor_process {

namespace {

std::string errno_text(int err) { return std::string(std::strerror(err)); }

std::string dl_text() {
  const char *e = dlerror();
  return e ? std::string(e) : std::string("no error text from the dynamic loader");
}

bool is_mangled(const std::string &name) {
  return name.size() > 2 && name.compare(0, 2, "_Z") == 0;
}

/// The readable form of a C++ symbol, or "" when it does not demangle.
std::string demangle(const std::string &name) {
  int status = 0;
  char *text = abi::__cxa_demangle(name.c_str(), nullptr, nullptr, &status);
  std::string out = status == 0 && text ? std::string(text) : std::string();
  std::free(text);
  return out;
}

/// A free function of the global namespace whose parameters are those of an
/// rFaaS function (this ABI's, or the original one's): almost certainly a
/// function its author meant to export, declared without extern "C".
bool looks_like_a_function(const std::string &demangled) {
  size_t paren = demangled.find('(');
  if (paren == std::string::npos || paren == 0)
    return false;
  std::string name = demangled.substr(0, paren);
  if (name.find("::") != std::string::npos || name.find('<') != std::string::npos)
    return false;
  std::string params = demangled.substr(paren);
  return params == "(void const*, unsigned int, void*, unsigned int)" ||
         params == "(void*, unsigned int, void*, unsigned int)" ||
         params == "(void*, unsigned int, void*)" || params == "(void const*, unsigned int, void*)";
}

/// Refuse a library that does not follow the function ABI. `names` are all
/// the exported functions, mangled ones included; `plain` receives the rest.
void check_abi(void *handle, const std::vector<std::string> &names, const std::string &lib_name,
               std::vector<std::string> &plain) {
  const std::string where = " (library '" + lib_name + "')";
  plain.clear();
  for (const std::string &n : names) {
    if (!is_mangled(n)) {
      plain.push_back(n);
      continue;
    }
    std::string readable = demangle(n);
    if (looks_like_a_function(readable))
      throw LibraryError("function `" + n +
                         "` is C++-mangled: declare it with RFAAS_FUNCTION or "
                         "extern \"C\"" +
                         where + "; it is " + readable);
  }
  dlerror();
  const void *marker = dlsym(handle, RFAAS_FUNCTION_ABI_SYMBOL_NAME);
  if (!marker)
    throw LibraryError("no function ABI version (" RFAAS_FUNCTION_ABI_SYMBOL_NAME
                       "): include <rfaas/function.hpp> and declare functions with "
                       "RFAAS_FUNCTION" +
                       where);
  uint32_t version;
  std::memcpy(&version, marker, sizeof version);
  if (version != RFAAS_FUNCTION_ABI_VERSION)
    throw LibraryError("function ABI version " + std::to_string(version) +
                       ", this executor runs version " +
                       std::to_string(RFAAS_FUNCTION_ABI_VERSION) +
                       ": rebuild against this rFaaS's <rfaas/function.hpp>" + where);
  if (plain.empty())
    throw LibraryError("no functions exported: declare them with RFAAS_FUNCTION from "
                       "<rfaas/function.hpp>" +
                       where);
}

} // namespace

FunctionLibrary::~FunctionLibrary() { release(); }

FunctionLibrary::FunctionLibrary(FunctionLibrary &&o) noexcept
    : handle_(std::exchange(o.handle_, nullptr)), memfd_(std::exchange(o.memfd_, -1)),
      name_(std::move(o.name_)), table_(std::move(o.table_)), by_hash_(std::move(o.by_hash_)) {}

FunctionLibrary &FunctionLibrary::operator=(FunctionLibrary &&o) noexcept {
  if (this != &o) {
    release();
    handle_ = std::exchange(o.handle_, nullptr);
    memfd_ = std::exchange(o.memfd_, -1);
    name_ = std::move(o.name_);
    table_ = std::move(o.table_);
    by_hash_ = std::move(o.by_hash_);
  }
  return *this;
}

void FunctionLibrary::release() noexcept {
  table_.clear();
  by_hash_.clear();
  if (handle_) {
    if (dlclose(handle_) != 0)
      std::fprintf(stderr, "rfaas: dlclose of function library '%s' failed: %s\n", name_.c_str(),
                   dl_text().c_str());
    handle_ = nullptr;
  }
  if (memfd_ >= 0) {
    close(memfd_);
    memfd_ = -1;
  }
}

namespace {
/// Write all `size` bytes to `fd`; 0, or the errno of the write that failed.
int write_fully(int fd, const void *bytes, size_t size) {
  const auto *p = static_cast<const char *>(bytes);
  while (size > 0) {
    ssize_t n = write(fd, p, size);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0)
      return errno;
    p += n;
    size -= static_cast<size_t>(n);
  }
  return 0;
}

/// The library's image in a new file of $TMPDIR (else /tmp), read-only; its
/// path. Throws LibraryError.
std::string copy_to_private_file(const void *bytes, size_t size, const std::string &what) {
  const char *dir = std::getenv("TMPDIR");
  std::string path = std::string(dir && *dir ? dir : "/tmp") + "/rfaas-library-XXXXXX";
  int fd = mkstemp(path.data());
  if (fd < 0)
    throw LibraryError("cannot load " + what + ": no /proc/self/fd and mkstemp " + path + ": " +
                       errno_text(errno));
  if (int e = write_fully(fd, bytes, size)) {
    close(fd);
    unlink(path.c_str());
    throw LibraryError("cannot copy " + what + " to " + path + ": " + errno_text(e));
  }
  fchmod(fd, 0500);
  close(fd);
  return path;
}
} // namespace

FunctionLibrary FunctionLibrary::load(const void *bytes, size_t size, const std::string &name) {
  const std::string what = "function library '" + name + "'";
  if (bytes == nullptr || size == 0)
    throw LibraryError(what + " is empty");

  std::string error;
  if (!check_elf_image(bytes, size, error))
    throw LibraryError("cannot load " + what + ": " + error);

  FunctionLibrary lib;
  lib.name_ = name;
  // The memfd name shows up in /proc/<pid>/maps; it needs no uniqueness.
  std::string memfd_name = "rfaas:" + name.substr(0, 200);
  lib.memfd_ = memfd_create(memfd_name.c_str(), MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (lib.memfd_ < 0)
    throw LibraryError("cannot create an in-memory file for " + what +
                       ": memfd_create: " + errno_text(errno));

  if (int e = write_fully(lib.memfd_, bytes, size))
    throw LibraryError("cannot copy " + what + " (" + std::to_string(size) +
                       " bytes) into memory: write: " + errno_text(e));
  // Freeze the image: nobody (this process included) can change what was
  // loaded. Best effort: sealing is a defence, not a requirement.
  (void)fcntl(lib.memfd_, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL);

  std::string path = "/proc/self/fd/" + std::to_string(lib.memfd_);
  // A sandbox without /proc (one that keeps the host's PID namespace) has no
  // path to the memfd: the image goes to a file of the executor's private
  // /tmp instead, removed as soon as it is loaded.
  std::string file;
  if (access(path.c_str(), F_OK) != 0) {
    file = copy_to_private_file(bytes, size, what);
    path = file;
  }
  dlerror(); // clear any stale error
  // RTLD_NOW: an unresolved symbol fails here, not in the middle of a call.
  // RTLD_LOCAL: two allocations' libraries never see each other's symbols.
  lib.handle_ = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!file.empty())
    unlink(file.c_str());
  if (!lib.handle_)
    throw LibraryError("cannot load " + what + " from memory: " + dl_text());

  std::vector<std::string> exported, names;
  if (!list_exported_functions(bytes, size, exported, error))
    throw LibraryError("cannot list the functions of " + what + ": " + error);
  check_abi(lib.handle_, exported, name, names);

  lib.table_.reserve(names.size());
  for (std::string &n : names) {
    dlerror();
    void *sym = dlsym(lib.handle_, n.c_str());
    if (!sym)
      throw LibraryError("cannot resolve function '" + n + "' in " + what + ": " + dl_text());
    FunctionEntry e;
    e.hash = protocol::function_hash(n);
    e.function = reinterpret_cast<Function>(sym);
    const std::string marker = RFAAS_FUNCTION_IN_PLACE_PREFIX + n;
    dlerror();
    e.in_place = dlsym(lib.handle_, marker.c_str()) != nullptr;
    e.name = std::move(n);
    lib.table_.push_back(std::move(e));
  }

  lib.by_hash_.reserve(lib.table_.size());
  for (uint32_t i = 0; i < lib.table_.size(); ++i)
    lib.by_hash_.emplace_back(lib.table_[i].hash, i);
  std::sort(lib.by_hash_.begin(), lib.by_hash_.end());
  for (size_t i = 1; i < lib.by_hash_.size(); ++i) {
    if (lib.by_hash_[i].first == lib.by_hash_[i - 1].first) {
      char hex[16];
      std::snprintf(hex, sizeof hex, "0x%08x", lib.by_hash_[i].first);
      throw LibraryError(what + ": functions '" + lib.table_[lib.by_hash_[i - 1].second].name +
                         "' and '" + lib.table_[lib.by_hash_[i].second].name +
                         "' have the same name hash " + hex +
                         ", so invocations could not tell them apart; rename one");
    }
  }
  return lib;
}

Function FunctionLibrary::find(std::string_view name) const noexcept {
  long i = index_of(name);
  return i < 0 ? nullptr : table_[static_cast<size_t>(i)].function;
}

long FunctionLibrary::index_of(std::string_view name) const noexcept {
  auto it = std::lower_bound(table_.begin(), table_.end(), name,
                             [](const FunctionEntry &e, std::string_view n) { return e.name < n; });
  if (it == table_.end() || it->name != name)
    return -1;
  return static_cast<long>(it - table_.begin());
}

Function FunctionLibrary::find_hash(uint32_t hash) const noexcept {
  const FunctionEntry *e = entry_hash(hash);
  return e ? e->function : nullptr;
}

const FunctionEntry *FunctionLibrary::entry_hash(uint32_t hash) const noexcept {
  auto it = std::lower_bound(
      by_hash_.begin(), by_hash_.end(), hash,
      [](const std::pair<uint32_t, uint32_t> &e, uint32_t h) { return e.first < h; });
  if (it == by_hash_.end() || it->first != hash)
    return nullptr;
  return &table_[it->second];
}

Function FunctionLibrary::resolve(const std::string &name) const {
  if (!handle_)
    throw LibraryError("cannot resolve function '" + name + "': no library is loaded");
  dlerror();
  void *sym = dlsym(handle_, name.c_str());
  if (!sym)
    throw LibraryError("function '" + name + "' not found in function library '" + name_ +
                       "': " + dl_text());
  return reinterpret_cast<Function>(sym);
}

} // namespace rfaas::executor_process
