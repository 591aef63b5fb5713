// Standard output shared by the printing callbacks and the progress bar.
//
// The progress bar is a "status line": the last line of the terminal, redrawn in place (carriage
// return, erase line). print_line erases it, prints the line and redraws it below, so printed
// lines are never mixed with the bar.
#pragma once

#include <string>

namespace cleave::train::console {

// Writes `line` and a newline to stdout, flushed, above the status line if one is shown.
void print_line(const std::string& line);
// Shows `status` as the status line (replacing the previous one); stdout must be a terminal.
void set_status(const std::string& status);
// Erases the status line, if one is shown.
void clear_status();
// Whether stdout is a terminal.
bool stdout_is_terminal();

}  // namespace cleave::train::console
