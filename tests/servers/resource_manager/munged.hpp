// A real munged for tests: its own key, socket, log and seed in a temporary
// directory, in the foreground as this test's child (it dies with the test),
// ready once its socket exists. Credentials are made with libmunge against
// that socket, with a chosen time to live and payload.
#pragma once

#include <munge.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "../../e2e/process.hpp"
#include "protocol/rm_messages.hpp"

namespace rfaas::rm::test {

class Munged {
public:
  Munged() = default;
  Munged(const Munged &) = delete;
  Munged &operator=(const Munged &) = delete;
  ~Munged() { stop(); }

  /// Why munged cannot run here ("" when it can): the tools are missing.
  static std::string unavailable() {
    for (const char *tool : {"munged", "mungekey"})
      if (std::system((std::string("command -v ") + tool + " >/dev/null 2>&1").c_str()) != 0)
        return std::string(tool) + " not found (Debian package munge)";
    return "";
  }

  /// Starts munged with a fresh key. Returns "" or why it failed.
  std::string start() {
    char tmpl[] = "/tmp/rfaas-munged-XXXXXX";
    if (!mkdtemp(tmpl))
      return "mkdtemp failed";
    dir_ = tmpl;
    // munged refuses a socket directory others cannot traverse and a key
    // directory others can write to.
    ::chmod(dir_.c_str(), 0755);
    socket_ = dir_ + "/munge.sock";
    if (std::system(
            ("mungekey -c -k '" + dir_ + "/munge.key' 2>'" + dir_ + "/mungekey.err'").c_str()) != 0)
      return "mungekey failed (see " + dir_ + "/mungekey.err)";
    proc_ = rfaas::e2e::Process(
        {"/usr/sbin/munged", "--foreground", "--force", "--key-file=" + dir_ + "/munge.key",
         "--socket=" + socket_, "--pid-file=" + dir_ + "/munged.pid",
         "--log-file=" + dir_ + "/munged.log", "--seed-file=" + dir_ + "/munged.seed"},
        dir_ + "/munged.err");
    // Ready when its socket exists (bounded).
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    struct stat st;
    while (::stat(socket_.c_str(), &st) != 0) {
      if (std::chrono::steady_clock::now() > deadline)
        return "munged did not create " + socket_ + " within 10 s (see " + dir_ + ")";
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    // Clients of another user must reach the socket too.
    ::chmod(socket_.c_str(), 0777);
    return "";
  }

  void stop() {
    if (proc_.running())
      proc_.stop(std::chrono::milliseconds(3000));
    if (!dir_.empty() && !std::getenv("RFAAS_TEST_KEEP"))
      std::system(("rm -rf '" + dir_ + "'").c_str());
    dir_.clear();
  }

  const std::string &socket() const { return socket_; }

  /// A credential from this munged for `request` (payload: its binding and
  /// `job`), with a time to live of `ttl_s` seconds (0: munged's default).
  /// Empty when munged refused.
  std::string credential(const protocol::LeaseRequest &request, const std::string &job = "",
                         int ttl_s = 0) const {
    std::vector<uint8_t> payload = protocol::lease_request_binding(request);
    payload.insert(payload.end(), job.begin(), job.end());
    struct Free {
      void operator()(munge_ctx_t c) const { munge_ctx_destroy(c); }
    };
    std::unique_ptr<std::remove_pointer_t<munge_ctx_t>, Free> ctx(munge_ctx_create());
    munge_ctx_set(ctx.get(), MUNGE_OPT_SOCKET, socket_.c_str());
    if (ttl_s > 0)
      munge_ctx_set(ctx.get(), MUNGE_OPT_TTL, ttl_s);
    char *out = nullptr;
    if (munge_encode(&out, ctx.get(), payload.data(), static_cast<int>(payload.size())) !=
        EMUNGE_SUCCESS)
      return "";
    std::string cred(out);
    std::free(out);
    return cred;
  }

private:
  std::string dir_;
  std::string socket_;
  rfaas::e2e::Process proc_;
};

} // namespace rfaas::rm::test
