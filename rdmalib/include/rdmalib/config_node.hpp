// The one strict reader of rFaaS's JSON files: the device database, the
// client's server list, the executor manager's configuration (and any later
// daemon's). Every mistake is reported the same way, as one line:
//
//   <file>: <JSON path>: <what is wrong>; <what was expected or the valid choices>
//   devices.json: devices[2].prot: unknown key; valid keys here: name, provider, ...
//   devices.json: devices[1].port: expected an integer 0..65535, got string "7000"
//   em.json: resources.cores: missing required key; expected CPU ids, e.g. [1, 2]
//   devices.json: devices[0].endpoint: expected one of auto, connected (or msg), rdm, got "x"
//   em.json: malformed JSON at byte 40: [json.exception.parse_error.101] ...
//
// Strict on purpose: unknown keys are rejected (a typo must not fall back to a
// default silently), types are not converted ("7000" is not a port) and numbers
// are range-checked where they are read, so the rest of a program can trust
// what it got.
//
// Lives in rdmalib, the lowest layer, because the device database is read
// there; librfaas and the servers use it from their .cpp files only (it needs
// nlohmann-json, which they link; librfaas's public headers stay free of it).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include <rdmalib/errors.hpp>

namespace rdmalib {

/// A value inside a parsed JSON document, with the file it came from and its
/// JSON path, so that any error about it can name both. Cheap to copy (it refers
/// to the document, which must outlive it). Every failing call throws
/// Error(ErrorKind::Config) with the one-line message described above.
class ConfigNode {
public:
  /// The document's root; `origin` names the file (or option) in messages.
  ConfigNode(const nlohmann::json &root, std::string origin);

  /// Parse `text`; a syntax error throws naming `origin` and the byte offset,
  /// a key given twice in one object naming `origin` and the key's path (JSON
  /// allows it, but the later value would silently win).
  static nlohmann::json parse(const std::string &text, const std::string &origin);
  /// Read a whole file; throws naming the file, the system's reason and
  /// `hint` (what the file is and how to get one) when it cannot be read.
  static std::string read_file(const std::string &path, const std::string &hint);

  /// The file or option this value came from.
  const std::string &origin() const noexcept { return origin_; }
  /// JSON path of this value ("devices[1].port"); "(top level)" for the root.
  std::string path() const;
  /// The raw value, for shapes the typed calls do not cover (a key that may be
  /// a string or an array); report problems with fail().
  const nlohmann::json &json() const noexcept { return *value_; }

  /// Throws naming this value: "<origin>: <path>: <what>".
  [[noreturn]] void fail(const std::string &what) const;

  // ---- objects ----
  /// Requires an object whose keys are all in `keys`; an unknown key is
  /// reported with the list of valid keys.
  void expect_object(std::initializer_list<const char *> keys) const;
  /// True when this object has member `key` (any type).
  bool has(const char *key) const;
  /// The member `key`; when absent, fails with "missing required key;
  /// expected <expected>".
  ConfigNode required(const char *key, const std::string &expected) const;
  /// The member `key`, which must exist (check has() first).
  ConfigNode operator[](const char *key) const;

  // ---- arrays ----
  /// Requires an array; returns its length.
  size_t expect_array() const;
  /// Element `i` of an array; `i` must be below expect_array()'s result.
  ConfigNode operator[](size_t i) const;

  // ---- scalars: each checks the type and names the expectation ----
  /// A string, possibly empty.
  std::string string() const;
  /// A string that must not be empty.
  std::string nonempty_string() const;
  /// true or false; a number or a string is an error, not a truth value.
  bool boolean() const;
  /// An integer within [min, max] (never a float, a string or a negative).
  uint64_t integer(uint64_t min, uint64_t max) const;
  /// A string naming one value of an enumeration, read with its own parse
  /// function (the one place that spells it); `names` lists the valid
  /// spellings for the message.
  template <class E> E enumeration(bool (*parse)(std::string_view, E &), const char *names) const {
    std::string s = typed_string((std::string("expected one of ") + names).c_str());
    E out{};
    if (!parse(s, out))
      fail(std::string("expected one of ") + names + ", got " + shown());
    return out;
  }

  // ---- optional members: left unchanged when absent ----
  /// Member `key` as a string into `out`, when present.
  void optional(const char *key, std::string &out) const;
  /// Member `key` as a boolean into `out`, when present.
  void optional(const char *key, bool &out) const;
  /// Member `key` as an unsigned integer in [min, max] into `out`, when present.
  template <class T> void optional(const char *key, T &out, uint64_t min, uint64_t max) const {
    if (has(key))
      out = static_cast<T>((*this)[key].integer(min, max));
  }

  /// A short rendering of the value for messages: its JSON type and text,
  /// cut at 60 characters ('string "7000"', 'number -1').
  std::string shown() const;

private:
  ConfigNode(const nlohmann::json *value, const std::string &origin, std::string path)
      : value_(value), origin_(origin), path_(std::move(path)) {}
  std::string typed_string(const char *expected_names) const;

  const nlohmann::json *value_;
  std::string origin_;
  std::string path_;
};

} // namespace rdmalib
