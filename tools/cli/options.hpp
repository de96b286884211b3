// Command-line option parsing for every rFaaS binary, benchmark and tool.
//
// The interface follows cxxopts (Debian's libcxxopts-dev), which does the
// parsing behind it, in one translation unit (options.cpp). Why not include
// cxxopts directly: its header instantiates std::regex and its value parsers
// in every file that uses it, 5-7 s of compile time per file at -O2 and
// 20-30 s under the sanitizers, paid by some sixteen programs in every build.
//
//   rfaas::cli::Options o("prog", "what it does");
//   o.add_options()("p,port", "port to listen on",
//   rfaas::cli::value<uint32_t>()->default_value("0"))
//                  ("verbose", "say more");
//   rfaas::cli::ParseResult args = o.parse(argc, argv);
//   uint32_t port = args["port"].as<uint32_t>();
//
// Errors (unknown option, missing or malformed value, asking for a value that
// was neither given nor defaulted) throw rfaas::cli::OptionError.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace rfaas::cli {

/// A bad command line: an unknown option, a value that does not parse, a
/// missing value. The message names the option.
struct OptionError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// The value types an option can take.
enum class ValueType { Text, Int, Uint32, Uint64, Double, Bool };

/// What an option takes: its type and, optionally, a default.
class Value : public std::enable_shared_from_this<Value> {
public:
  /// `target`, when set, is a variable of the matching type that parse()
  /// stores the value (given or default) in.
  explicit Value(ValueType type, void *target = nullptr) noexcept : type_(type), target_(target) {}
  /// The value when the option is not given (parsed like a given value).
  std::shared_ptr<Value> default_value(std::string text);
  ValueType type() const noexcept { return type_; }
  bool has_default() const noexcept { return has_default_; }
  const std::string &default_text() const noexcept { return default_; }
  void *target() const noexcept { return target_; }

private:
  ValueType type_;
  void *target_;
  bool has_default_ = false;
  std::string default_;
};

template <class T> struct ValueTypeOf;
template <> struct ValueTypeOf<std::string> { static constexpr ValueType kType = ValueType::Text; };
// int32_t is int, and size_t is uint64_t, on every platform rFaaS builds on.
template <> struct ValueTypeOf<int> { static constexpr ValueType kType = ValueType::Int; };
template <> struct ValueTypeOf<uint32_t> { static constexpr ValueType kType = ValueType::Uint32; };
template <> struct ValueTypeOf<uint64_t> { static constexpr ValueType kType = ValueType::Uint64; };
template <> struct ValueTypeOf<double> { static constexpr ValueType kType = ValueType::Double; };
template <> struct ValueTypeOf<bool> { static constexpr ValueType kType = ValueType::Bool; };
static_assert(std::is_same_v<size_t, uint64_t> && std::is_same_v<int32_t, int>);

/// An option taking a value of type T (std::string, int, int32_t, uint32_t,
/// uint64_t/size_t, double or bool).
template <class T> std::shared_ptr<Value> value() {
  return std::make_shared<Value>(ValueTypeOf<T>::kType);
}
/// The same, stored into `target` by Options::parse().
template <class T> std::shared_ptr<Value> value(T &target) {
  return std::make_shared<Value>(ValueTypeOf<T>::kType, &target);
}

class ParseResult;

/// The options of one program, grouped for --help.
class Options {
public:
  Options(std::string program, std::string description);
  ~Options();
  Options(Options &&) noexcept;
  Options &operator=(Options &&) noexcept;

  /// Adds options to `group` (shown as a heading in --help) by chained calls:
  /// (spec, help) for a flag, (spec, help, value<T>()) for an option taking a
  /// value. `spec` is "long" or "s,long".
  class Adder {
  public:
    Adder &operator()(const std::string &spec, const std::string &help);
    /// `arg_help` names the value in --help ("FILE" in "--devices FILE").
    Adder &operator()(const std::string &spec, const std::string &help,
                      const std::shared_ptr<Value> &value, const std::string &arg_help = "");

  private:
    friend class Options;
    Adder(Options &o, std::string group) : options_(o), group_(std::move(group)) {}
    Options &options_;
    std::string group_;
  };
  Adder add_options(std::string group = "");

  /// Text after the program name on the usage line of --help.
  void custom_help(const std::string &text);
  /// Width --help wraps at.
  void set_width(size_t width);
  /// The --help text.
  std::string help() const;
  /// Parses argv. Throws OptionError for an unknown option or a bad value.
  /// Arguments that are not options are kept in ParseResult::unmatched().
  ParseResult parse(int argc, const char *const *argv);

private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

/// The parsed command line. Stays valid after its Options are gone.
class ParseResult {
public:
  ParseResult();
  ~ParseResult();
  ParseResult(ParseResult &&) noexcept;
  ParseResult &operator=(ParseResult &&) noexcept;

  /// How many times `name` (its long name) was given; 0 when only defaulted.
  size_t count(const std::string &name) const;

  class Option {
  public:
    /// The value (given, else the default), converted to T (one of the
    /// types value<T>() accepts, the one the option was declared with).
    /// Throws OptionError when the option has no value.
    template <class T> T as() const;

  private:
    friend class ParseResult;
    Option(const ParseResult &r, std::string name) : result_(r), name_(std::move(name)) {}
    const ParseResult &result_;
    std::string name_;
  };
  Option operator[](const std::string &name) const { return Option(*this, name); }

  /// Arguments that are not options, in order.
  const std::vector<std::string> &unmatched() const noexcept;

private:
  friend class Options;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

} // namespace rfaas::cli
