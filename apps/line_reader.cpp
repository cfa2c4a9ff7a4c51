// LineReader over libedit's readline interface when the build found libedit, else std::getline.
#include "apps/line_reader.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>

#ifdef SHARDSCOPE_HAVE_LIBEDIT
#include <editline/readline.h>
#endif

namespace shardscope {

LineReader::LineReader(std::istream& in, std::ostream& out, bool terminal, std::string prompt)
    : in_(in), out_(out), terminal_(terminal), prompt_(std::move(prompt)) {
#ifdef SHARDSCOPE_HAVE_LIBEDIT
  if (terminal_) using_history();
#endif
}

LineReader::~LineReader() {
#ifdef SHARDSCOPE_HAVE_LIBEDIT
  if (terminal_) clear_history();
#endif
}

std::optional<std::string> LineReader::next() {
  std::string line;
  if (!terminal_) {
    if (!std::getline(in_, line)) return std::nullopt;
    return line;
  }
  out_.flush();
#ifdef SHARDSCOPE_HAVE_LIBEDIT
  char* read = readline(prompt_.c_str());
  if (!read) return std::nullopt;
  line = read;
  std::free(read);
  if (line.find_first_not_of(" \t") != std::string::npos) add_history(line.c_str());
  return line;
#else
  out_ << prompt_ << std::flush;
  if (!std::getline(in_, line)) return std::nullopt;
  return line;
#endif
}

bool reads_a_terminal(const std::istream& in) {
  return &in == &std::cin && isatty(STDIN_FILENO) == 1;
}

bool line_editing_available() {
#ifdef SHARDSCOPE_HAVE_LIBEDIT
  return true;
#else
  return false;
#endif
}

}  // namespace shardscope
