// Test-only hooks of the zygote and its executor pool: each makes one rare failure
// happen on demand, so that tests/servers/executor/pool_test.sh can check the
// pool's answer to it with real processes instead of waiting for the race.
//
// Inert in production: each hook is armed only by an environment variable
// naming a file (RFAAS_TEST_*), and acts only while that file exists. No
// configuration sets them, the executor manager passes its environment to
// the zygote unchanged, and an operator who never sets a RFAAS_TEST_*
// variable never runs a line of them beyond one getenv() at the zygote's
// start. docs/runtime.md ("The executor pool") names them.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

namespace rfaas::executor_process {

struct ZygoteTestHooks {
  /// RFAAS_TEST_POOL_STALL_FILE: the next pooled executor forked while the
  /// file exists removes it and stops itself (SIGSTOP) before it opens its
  /// fabric: it never reports in and its accounting link never comes up.
  /// When the file says "after-link", it hangs (pause()) after its
  /// accounting link connected instead, before it reports in to the zygote.
  /// When it says "after-spec", it reports in and takes an allocation as
  /// usual, then hangs after it got the LaunchSpec, before its workers
  /// connect to the client (the allocation's own executor, stuck or killed
  /// while its client waits for the workers).
  std::string stall_file;
  /// RFAAS_TEST_POOL_FAIL_FILE: while the file exists, every pooled
  /// executor exits with a setup failure right after its fork (a pool whose
  /// members fail at once, every time).
  std::string fail_file;
  /// RFAAS_TEST_HANDOVER_HOLD_FILE: the next hand-over of an allocation to
  /// a pooled executor while the file exists removes it, logs the executor's
  /// pid and holds between the zygote's last look at that executor and the
  /// write of the LaunchSpec, until the executor hangs up (at most 10 s):
  /// a test kills it in that window.
  std::string handover_hold_file;

  /// RFAAS_TEST_ZYGOTE_EXIT_FILE: while the file exists, the zygote exits
  /// right after it said it is ready (a zygote that fails at once, every
  /// time the manager restarts it).
  std::string zygote_exit_file;

  static ZygoteTestHooks from_environment() {
    ZygoteTestHooks h;
    auto get = [](const char *name) {
      const char *v = std::getenv(name);
      return std::string(v ? v : "");
    };
    h.stall_file = get("RFAAS_TEST_POOL_STALL_FILE");
    h.fail_file = get("RFAAS_TEST_POOL_FAIL_FILE");
    h.handover_hold_file = get("RFAAS_TEST_HANDOVER_HOLD_FILE");
    h.zygote_exit_file = get("RFAAS_TEST_ZYGOTE_EXIT_FILE");
    return h;
  }

  /// The one-shot hooks: true once per creation of `file` (removing it);
  /// `first_word`, when given, gets the file's first word.
  static bool take(const std::string &file, std::string *first_word = nullptr) {
    if (file.empty())
      return false;
    if (first_word) {
      std::ifstream in(file);
      in >> *first_word;
    }
    return ::unlink(file.c_str()) == 0;
  }
  /// The standing hook: true while `file` exists.
  static bool on(const std::string &file) {
    return !file.empty() && ::access(file.c_str(), F_OK) == 0;
  }
};

} // namespace rfaas::executor_process
