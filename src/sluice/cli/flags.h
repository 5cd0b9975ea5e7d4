// FlagParser: the small command-line parser every `sluice` subcommand uses.
//
// A subcommand declares its flags (each bound to a variable that holds its default), then
// parses the arguments that follow the command name. Accepted spellings: `--name value`,
// `--name=value`, and `--name` alone for booleans. Anything not starting with `--` is a
// positional argument; a lone `--` ends flag parsing. Unknown flags, missing or malformed
// values and out-of-range numbers are InvalidArgument errors naming the flag. `--help` and
// `-h` are always accepted and only set help_requested().
// A plain single-threaded value; the bound variables must outlive Parse().
#ifndef SLUICE_CLI_FLAGS_H_
#define SLUICE_CLI_FLAGS_H_

#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "sluice/core/status.h"

namespace sluice::cli {

class FlagParser {
 public:
  // `command` and `synopsis` appear in Usage(): "usage: <program> <command> <synopsis>"
  // (without the command when it is empty).
  FlagParser(std::string command, std::string synopsis, std::string program = "sluice");

  // Declares a flag bound to `*target`, whose current value is the default. Numeric flags
  // may carry inclusive bounds. `hidden` flags parse normally but are left out of Usage().
  void AddInt(std::string name, int64_t* target, std::string value_name, std::string doc,
              std::optional<int64_t> min = std::nullopt, std::optional<int64_t> max = std::nullopt);
  void AddDouble(std::string name, double* target, std::string value_name, std::string doc,
                 std::optional<double> min = std::nullopt,
                 std::optional<double> max = std::nullopt);
  void AddString(std::string name, std::string* target, std::string value_name, std::string doc);
  void AddBool(std::string name, bool* target, std::string doc, bool hidden = false);

  // Parses `args` (the words after the command name). Stops at the first error.
  Status Parse(const std::vector<std::string>& args);

  // True if the flag appeared on the command line (given its name without dashes).
  bool IsSet(const std::string& name) const;
  bool help_requested() const { return help_requested_; }
  const std::vector<std::string>& positional() const { return positional_; }

  // Multi-line usage text: synopsis, then one line per visible flag with its default.
  std::string Usage() const;

 private:
  using Target = std::variant<int64_t*, double*, std::string*, bool*>;
  struct Flag {
    std::string name;
    Target target;
    std::string value_name;
    std::string doc;
    std::string default_text;
    std::optional<double> min;
    std::optional<double> max;
    bool hidden = false;
    bool set = false;
  };

  Flag& Add(std::string name, Target target, std::string value_name, std::string doc,
            std::string default_text);
  Flag* Find(const std::string& name);
  Status Assign(Flag& flag, const std::string& value);

  std::string command_;
  std::string synopsis_;
  std::string program_;
  std::vector<Flag> flags_;
  std::vector<std::string> positional_;
  bool help_requested_ = false;
};

}  // namespace sluice::cli

#endif  // SLUICE_CLI_FLAGS_H_
