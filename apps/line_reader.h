// LineReader: the lines of `shardscope debug`'s commands, from a script (a stream, no prompt) or
// from a terminal (a prompt, and with libedit line editing and history; without it, the prompt
// and plain lines).
#pragma once

#include <istream>
#include <optional>
#include <ostream>
#include <string>

namespace shardscope {

class LineReader {
 public:
  // `terminal`: show `prompt` on `out` and edit lines (stdin must be that terminal).
  LineReader(std::istream& in, std::ostream& out, bool terminal, std::string prompt);
  ~LineReader();
  LineReader(const LineReader&) = delete;
  LineReader& operator=(const LineReader&) = delete;

  // The next line; nullopt at the end of the input.
  std::optional<std::string> next();
  bool terminal() const { return terminal_; }

 private:
  std::istream& in_;
  std::ostream& out_;
  bool terminal_;
  std::string prompt_;
};

// Whether `in` is std::cin and stdin is a terminal.
bool reads_a_terminal(const std::istream& in);
// Whether this build edits terminal lines with libedit.
bool line_editing_available();

}  // namespace shardscope
