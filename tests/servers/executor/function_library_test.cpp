// FunctionLibrary: load the example functions from memory (as an executor does
// with the bytes it received), list and resolve them, call them, and fail
// clearly on bad libraries and unknown names.
#include <gtest/gtest.h>

#include <elf.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "executor/elf_symbols.hpp"
#include "executor/function_library.hpp"
#include "protocol/protocol.hpp"

using rfaas::executor_process::FunctionLibrary;
using rfaas::executor_process::LibraryError;
using rfaas::protocol::function_hash;

namespace {

std::vector<uint8_t> read_file(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in) << "cannot open " << path;
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

std::string proc_maps() {
  std::ifstream in("/proc/self/maps");
  return std::string(std::istreambuf_iterator<char>(in), {});
}

bool fd_is_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

/// A length that cuts the last loadable segment of a 64-bit ELF image short
/// (how much debug information follows the segments varies with the build).
size_t inside_last_segment(const std::vector<uint8_t> &bytes) {
  Elf64_Ehdr eh;
  std::memcpy(&eh, bytes.data(), sizeof eh);
  uint64_t end = 0;
  for (unsigned i = 0; i < eh.e_phnum; ++i) {
    Elf64_Phdr ph;
    std::memcpy(&ph, bytes.data() + eh.e_phoff + i * sizeof ph, sizeof ph);
    if (ph.p_type == PT_LOAD && ph.p_filesz > 0)
      end = std::max<uint64_t>(end, ph.p_offset + ph.p_filesz);
  }
  return static_cast<size_t>(end - 1);
}

// Expects `f` to throw LibraryError whose text contains every needle.
template <class F> void expect_library_error(F &&f, std::vector<std::string> needles) {
  try {
    f();
    ADD_FAILURE() << "no LibraryError thrown";
  } catch (const LibraryError &e) {
    std::string what = e.what();
    for (const auto &n : needles)
      EXPECT_NE(what.find(n), std::string::npos) << "\"" << n << "\" not in: " << what;
  }
}

class FunctionLibraryTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    bytes_ = new std::vector<uint8_t>(read_file(RFAAS_EXAMPLE_FUNCTIONS));
  }
  static void TearDownTestSuite() {
    delete bytes_;
    bytes_ = nullptr;
  }
  static FunctionLibrary load(const std::string &name = "libfunctions.so") {
    return FunctionLibrary::load(bytes_->data(), bytes_->size(), name);
  }
  static std::vector<uint8_t> *bytes_;
};
std::vector<uint8_t> *FunctionLibraryTest::bytes_ = nullptr;

} // namespace

TEST_F(FunctionLibraryTest, ListsExactlyTheExportedFunctions) {
  ASSERT_GT(bytes_->size(), 0u);
  FunctionLibrary lib = load();
  ASSERT_TRUE(lib.loaded());
  EXPECT_EQ(lib.name(), "libfunctions.so");
  std::vector<std::string> names;
  for (const auto &e : lib.functions())
    names.push_back(e.name);
  // Sorted; hidden helpers and _init/_fini are not listed.
  EXPECT_EQ(names, (std::vector<std::string>{"bad_output_size", "crash", "echo", "echo_in_place",
                                             "expand", "invert_in_place", "matmul", "noop",
                                             "overflow", "overflow_in_place", "sleep_echo",
                                             "sleep_ms", "sum_squares"}));
  for (const auto &e : lib.functions()) {
    EXPECT_EQ(e.hash, function_hash(e.name));
    EXPECT_NE(e.function, nullptr) << e.name;
    // Exactly the functions declared with RFAAS_FUNCTION_IN_PLACE carry the
    // marker (and the marker objects are not listed as functions).
    const bool declared_in_place =
        e.name.size() > 9 && e.name.compare(e.name.size() - 9, 9, "_in_place") == 0;
    EXPECT_EQ(e.in_place, declared_in_place) << e.name;
  }
}

TEST_F(FunctionLibraryTest, LoadsFromAMemfdWithNoFileOnDisk) {
  FunctionLibrary lib = load("no-file-test.so");
  ASSERT_GE(lib.memfd(), 0);
  char target[256] = {};
  std::string link = "/proc/self/fd/" + std::to_string(lib.memfd());
  ASSERT_GT(readlink(link.c_str(), target, sizeof target - 1), 0);
  EXPECT_EQ(std::string(target).rfind("/memfd:rfaas:no-file-test.so", 0), 0u) << target;
  // The memfd is close-on-exec: executors must not leak it into children.
  EXPECT_TRUE(fcntl(lib.memfd(), F_GETFD) & FD_CLOEXEC);
  EXPECT_NE(proc_maps().find("memfd:rfaas:no-file-test.so"), std::string::npos);
}

TEST_F(FunctionLibraryTest, CallsFunctions) {
  FunctionLibrary lib = load();

  std::string in = "hello, rFaaS";
  std::vector<char> out(4 * in.size() + 16, '\0');
  const auto cap = static_cast<uint32_t>(out.size());
  const auto size = static_cast<uint32_t>(in.size());
  auto echo = lib.find("echo");
  ASSERT_NE(echo, nullptr);
  EXPECT_EQ(echo(in.data(), size, out.data(), cap), in.size());
  EXPECT_EQ(std::string(out.data(), in.size()), in);
  // Functions honour the capacity they are given.
  EXPECT_EQ(echo(in.data(), size, out.data(), size - 1), 0u);

  auto expand = lib.find("expand");
  ASSERT_NE(expand, nullptr);
  ASSERT_EQ(expand(in.data(), size, out.data(), cap), 4 * in.size());
  EXPECT_EQ(std::string(out.data(), 4 * in.size()), in + in + in + in);
  // Too small: nothing written, the needed size returned (output_too_large).
  std::fill(out.begin(), out.end(), '\0');
  EXPECT_EQ(expand(in.data(), size, out.data(), 4 * size - 1), 4 * size);
  EXPECT_EQ(out[0], '\0');

  uint64_t values[] = {1, 2, 3, 0x100000000ull};
  uint64_t sum = 0;
  EXPECT_EQ(lib.find("sum_squares")(values, sizeof values, &sum, sizeof sum), sizeof sum);
  EXPECT_EQ(sum, 1u + 4u + 9u + 0u); // (2^32)^2 wraps to 0 modulo 2^64

  // [1 2; 3 4] * [5 6; 7 8] = [19 22; 43 50]
  std::vector<uint8_t> mm(4 + 8 * sizeof(double));
  uint32_t n = 2;
  double ab[8] = {1, 2, 3, 4, 5, 6, 7, 8};
  std::memcpy(mm.data(), &n, 4);
  std::memcpy(mm.data() + 4, ab, sizeof ab);
  double c[4] = {};
  EXPECT_EQ(lib.find("matmul")(mm.data(), static_cast<uint32_t>(mm.size()), c, sizeof c), sizeof c);
  EXPECT_EQ(c[0], 19);
  EXPECT_EQ(c[1], 22);
  EXPECT_EQ(c[2], 43);
  EXPECT_EQ(c[3], 50);
  EXPECT_EQ(lib.find("matmul")(mm.data(), 5, c, sizeof c), 0u); // malformed: no output
  // C does not fit: no output.
  EXPECT_EQ(lib.find("matmul")(mm.data(), static_cast<uint32_t>(mm.size()), c, sizeof c - 1), 0u);

  EXPECT_EQ(lib.find("noop")(nullptr, 0, nullptr, 0), 0u);
  EXPECT_EQ(lib.find("bad_output_size")(nullptr, 0, nullptr, 0), UINT32_MAX);
  uint32_t ms = 1;
  EXPECT_EQ(lib.find("sleep_ms")(&ms, sizeof ms, nullptr, 0), 0u);
}

TEST_F(FunctionLibraryTest, NameHashAndIndexAgree) {
  FunctionLibrary lib = load();
  for (size_t i = 0; i < lib.size(); ++i) {
    const auto &e = lib.functions()[i];
    EXPECT_EQ(lib.at(i), e.function);
    EXPECT_EQ(lib.find(e.name), e.function);
    EXPECT_EQ(lib.find_hash(function_hash(e.name)), e.function);
    EXPECT_EQ(lib.index_of(e.name), static_cast<long>(i));
    EXPECT_EQ(lib.resolve(e.name), e.function);
  }
  EXPECT_EQ(lib.at(lib.size()), nullptr);
  EXPECT_EQ(lib.find("no_such_function"), nullptr);
  EXPECT_EQ(lib.find(""), nullptr);
  EXPECT_EQ(lib.find_hash(function_hash("no_such_function")), nullptr);
  EXPECT_EQ(lib.index_of("no_such_function"), -1);
}

TEST_F(FunctionLibraryTest, UnknownFunctionNamesTheFunctionAndTheLoaderError) {
  FunctionLibrary lib = load();
  expect_library_error([&] { lib.resolve("no_such_function"); },
                       {"no_such_function", "libfunctions.so", "undefined symbol"});
}

TEST_F(FunctionLibraryTest, DestructorUnloadsAndClosesTheMemfd) {
  int fd;
  {
    FunctionLibrary lib = load("raii-test.so");
    fd = lib.memfd();
    ASSERT_TRUE(fd_is_open(fd));
    ASSERT_NE(proc_maps().find("memfd:rfaas:raii-test.so"), std::string::npos);
  }
  EXPECT_FALSE(fd_is_open(fd));
  EXPECT_EQ(proc_maps().find("memfd:rfaas:raii-test.so"), std::string::npos)
      << "the library is still mapped after the FunctionLibrary was destroyed";
}

TEST_F(FunctionLibraryTest, MovesOwnership) {
  FunctionLibrary a = load();
  int fd = a.memfd();
  FunctionLibrary b(std::move(a));
  EXPECT_FALSE(a.loaded());
  EXPECT_EQ(a.memfd(), -1);
  EXPECT_EQ(a.find("echo"), nullptr);
  ASSERT_TRUE(b.loaded());
  EXPECT_EQ(b.memfd(), fd);
  FunctionLibrary c;
  c = std::move(b);
  EXPECT_FALSE(b.loaded());
  char x = 'x', y = 0;
  EXPECT_EQ(c.find("echo")(&x, 1, &y, 1), 1u);
  EXPECT_EQ(y, 'x');
  EXPECT_TRUE(fd_is_open(fd));
}

TEST_F(FunctionLibraryTest, TwoLoadsAreIndependentCopies) {
  // Two allocations in one process (a pool) must not share a library image.
  FunctionLibrary a = load("copy-a.so");
  FunctionLibrary b = load("copy-b.so");
  EXPECT_NE(a.memfd(), b.memfd());
  EXPECT_NE(a.find("echo"), b.find("echo"));
  { FunctionLibrary gone = std::move(a); }
  char x = 'q', y = 0;
  EXPECT_EQ(b.find("echo")(&x, 1, &y, 1), 1u);
  EXPECT_EQ(y, 'q');
}

TEST_F(FunctionLibraryTest, TheCallerMayFreeTheBytesAfterLoading) {
  std::vector<uint8_t> copy = *bytes_;
  FunctionLibrary lib = FunctionLibrary::load(copy.data(), copy.size(), "freed.so");
  std::fill(copy.begin(), copy.end(), 0);
  copy.clear();
  copy.shrink_to_fit();
  char x = 'z', y = 0;
  EXPECT_EQ(lib.find("echo")(&x, 1, &y, 1), 1u);
  EXPECT_EQ(y, 'z');
}

TEST(FunctionLibraryErrors, EmptyInput) {
  expect_library_error([] { FunctionLibrary::load(nullptr, 0, "empty.so"); },
                       {"empty.so", "empty"});
  uint8_t b = 0;
  expect_library_error([&] { FunctionLibrary::load(&b, 0, "empty.so"); }, {"empty.so"});
}

TEST(FunctionLibraryErrors, GarbageIsRefusedWithTheLoaderText) {
  std::vector<uint8_t> junk(4096);
  for (size_t i = 0; i < junk.size(); ++i)
    junk[i] = static_cast<uint8_t>(i * 131 + 7);
  expect_library_error([&] { FunctionLibrary::load(junk.data(), junk.size(), "junk.so"); },
                       {"cannot load", "junk.so", "ELF"});
}

TEST(FunctionLibraryErrors, TruncatedLibraryIsRefused) {
  // The loader maps segments without comparing them to the file size: without
  // the image check, a cut library loads and then dies of SIGBUS.
  auto bytes = read_file(RFAAS_EXAMPLE_FUNCTIONS);
  expect_library_error(
      [&] { FunctionLibrary::load(bytes.data(), inside_last_segment(bytes), "cut.so"); },
      {"cut.so", "truncated"});
  // Any cut is refused with a LibraryError (never a crash or a half-loaded
  // library), down to the section headers at the very end.
  for (size_t keep = 1; keep < bytes.size(); keep += 101) {
    SCOPED_TRACE(keep);
    expect_library_error([&] { FunctionLibrary::load(bytes.data(), keep, "cut.so"); }, {"cut.so"});
  }
}

TEST(FunctionLibraryErrors, UnresolvedSymbolFailsAtLoad) {
  auto bytes = read_file(RFAAS_TEST_UNRESOLVED_LIBRARY);
  expect_library_error([&] { FunctionLibrary::load(bytes.data(), bytes.size(), "unresolved.so"); },
                       {"cannot load", "unresolved.so", "rfaas_test_symbol_that_does_not_exist"});
}

TEST(FunctionLibraryErrors, NameHashCollisionIsRefused) {
  static_assert(function_hash("costarring") == function_hash("liquid"), "known FNV-1a pair");
  auto bytes = read_file(RFAAS_TEST_COLLISION_LIBRARY);
  expect_library_error([&] { FunctionLibrary::load(bytes.data(), bytes.size(), "collision.so"); },
                       {"collision.so", "costarring", "liquid", "same name hash", "rename"});
}

// ---- the function ABI -------------------------------------------------------------

namespace {
void expect_refused(const char *path, const char *name, std::vector<std::string> needles) {
  auto bytes = read_file(path);
  needles.push_back(std::string("library '") + name + "'");
  expect_library_error([&] { FunctionLibrary::load(bytes.data(), bytes.size(), name); }, needles);
}
} // namespace

TEST(FunctionAbi, TheExamplesExportTheVersionMarker) {
  auto bytes = read_file(RFAAS_EXAMPLE_FUNCTIONS);
  FunctionLibrary lib = FunctionLibrary::load(bytes.data(), bytes.size(), "libfunctions.so");
  // The marker is data, not a function: it is not in the table.
  EXPECT_EQ(lib.find(RFAAS_FUNCTION_ABI_SYMBOL_NAME), nullptr);
  EXPECT_EQ(lib.index_of(RFAAS_FUNCTION_ABI_SYMBOL_NAME), -1);
}

TEST(FunctionAbi, ALibraryWithoutFunctionsIsRefused) {
  expect_refused(RFAAS_TEST_NO_FUNCTIONS_LIBRARY, "none.so", {"no functions", "RFAAS_FUNCTION"});
}

TEST(FunctionAbi, AnotherAbiVersionIsRefused) {
  expect_refused(RFAAS_TEST_WRONG_ABI_LIBRARY, "old.so",
                 {"function ABI version 1", "runs version 2", "<rfaas/function.hpp>"});
}

TEST(FunctionAbi, ALibraryWithoutTheVersionMarkerIsRefused) {
  // The original rFaaS signature: calling it with a capacity would be wrong.
  expect_refused(RFAAS_TEST_V1_LIBRARY, "v1.so",
                 {"no function ABI version", RFAAS_FUNCTION_ABI_SYMBOL_NAME, "<rfaas/function.hpp>",
                  "RFAAS_FUNCTION"});
}

TEST(FunctionAbi, MangledFunctionsAreNamed) {
  expect_refused(RFAAS_TEST_MANGLED_LIBRARY, "mangled.so",
                 {"function `_Z4echoPvjS_` is C++-mangled: declare it with RFAAS_FUNCTION or "
                  "extern \"C\"",
                  "echo(void*, unsigned int, void*)"});
}

TEST(FunctionAbi, TheImportantPartFitsAReadyMessage) {
  // The client sees the first 127 characters (protocol::kMessageCapacity):
  // the problem and its fix come first, the library's name last.
  auto bytes = read_file(RFAAS_TEST_MANGLED_LIBRARY);
  try {
    FunctionLibrary::load(bytes.data(), bytes.size(), "mangled.so");
    FAIL() << "loaded";
  } catch (const LibraryError &e) {
    std::string what = e.what();
    EXPECT_EQ(what.rfind("function `_Z4echoPvjS_` is C++-mangled", 0), 0u) << what;
    EXPECT_LT(what.find("extern \"C\""), 127u) << what;
  }
  for (const char *path :
       {RFAAS_TEST_V1_LIBRARY, RFAAS_TEST_WRONG_ABI_LIBRARY, RFAAS_TEST_NO_FUNCTIONS_LIBRARY}) {
    auto b = read_file(path);
    try {
      FunctionLibrary::load(b.data(), b.size(), "x.so");
      ADD_FAILURE() << path << " loaded";
    } catch (const LibraryError &e) {
      std::string what = e.what();
      EXPECT_LT(what.find(" (library 'x.so')"), 127u) << what;
    }
  }
}

TEST(ElfSymbols, MalformedImagesAreReportedNotCrashedOn) {
  std::vector<std::string> names;
  std::string error;
  EXPECT_FALSE(rfaas::executor_process::list_exported_functions(nullptr, 0, names, error));
  EXPECT_FALSE(error.empty());

  auto bytes = read_file(RFAAS_EXAMPLE_FUNCTIONS);
  ASSERT_TRUE(
      rfaas::executor_process::list_exported_functions(bytes.data(), bytes.size(), names, error))
      << error;
  EXPECT_EQ(names.size(), 13u);

  // Every truncation, and section-header offsets pointing anywhere, must be
  // rejected or parsed within bounds (ASan builds check the "within").
  for (size_t keep = 0; keep < bytes.size(); keep += 97)
    rfaas::executor_process::list_exported_functions(bytes.data(), keep, names, error);
  EXPECT_TRUE(rfaas::executor_process::check_elf_image(bytes.data(), bytes.size(), error)) << error;
  EXPECT_FALSE(
      rfaas::executor_process::check_elf_image(bytes.data(), inside_last_segment(bytes), error));
  EXPECT_NE(error.find("truncated"), std::string::npos) << error;

  auto broken = bytes;
  uint64_t huge = ~0ull - 10;
  std::memcpy(&broken[0x28], &huge, sizeof huge); // e_shoff
  EXPECT_FALSE(
      rfaas::executor_process::list_exported_functions(broken.data(), broken.size(), names, error));
  EXPECT_NE(error.find("outside"), std::string::npos) << error;
  broken = bytes;
  broken[4] = 1; // ELFCLASS32
  EXPECT_FALSE(
      rfaas::executor_process::list_exported_functions(broken.data(), broken.size(), names, error));
  EXPECT_NE(error.find("64-bit"), std::string::npos) << error;
}

// The fault-test function really faults. Under AddressSanitizer the SEGV is
// reported by ASan, which then exits with an error, or aborts (SIGABRT) with
// ASAN_OPTIONS=abort_on_error=1 as scripts/test.sh sets it.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
TEST_F(FunctionLibraryTest, CrashDiesOfSigsegv) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  FunctionLibrary lib = load();
  auto crash = lib.find("crash");
  ASSERT_NE(crash, nullptr);
  auto died_of_segv = [](int status) {
    return (WIFSIGNALED(status) &&
            (WTERMSIG(status) == SIGSEGV || (kSanitized && WTERMSIG(status) == SIGABRT))) ||
           (WIFEXITED(status) && WEXITSTATUS(status) != 0);
  };
  EXPECT_EXIT(crash(nullptr, 0, nullptr, 0), died_of_segv, "");
}
