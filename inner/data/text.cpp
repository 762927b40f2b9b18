#include "inner/data/text.h"

#include <sys/wait.h>

#include <cstdio>

#include "inner/data/idx.h"

namespace geoloco::inner {

Result<std::string> run_bible() {
  // popen runs through /bin/sh, so a missing program shows as exit status 127.
  FILE* pipe = ::popen("bible 'Gen1:1-Rev22:21' 2>/dev/null", "r");
  GEOLOCO_RETURN_IF(pipe == nullptr, Err::io, "cannot start the `bible` program");
  std::string text;
  char buf[1 << 16];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, pipe)) > 0) text.append(buf, n);
  const int status = ::pclose(pipe);
  GEOLOCO_RETURN_IF(status == -1 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || text.empty(), Err::io,
                    "`bible \"Gen1:1-Rev22:21\"` failed (exit status ", WIFEXITED(status) ? WEXITSTATUS(status) : -1,
                    "): install the Debian package bible-kjv, or pass a text file");
  return text;
}

Result<std::string> read_text(const std::string& path) {
  auto bytes = read_file(path, std::size_t{1} << 30);
  if (!bytes.ok()) return bytes.status();
  return std::string(bytes->begin(), bytes->end());
}

Result<std::unique_ptr<TextDataset>> TextDataset::create(std::string text, std::size_t context, double heldout_fraction,
                                                         std::size_t eval_limit) {
  GEOLOCO_RETURN_IF(!(heldout_fraction > 0.0 && heldout_fraction < 1.0), Err::invalid_argument,
                    "text: heldout_fraction must be in (0, 1), got ", heldout_fraction);
  GEOLOCO_RETURN_IF(context == 0, Err::invalid_argument, "text: context must be >= 1");
  const std::size_t heldout = static_cast<std::size_t>(static_cast<double>(text.size()) * heldout_fraction);
  const std::size_t train = text.size() - heldout;
  GEOLOCO_RETURN_IF(train < context + 1 || heldout < context + 1, Err::invalid_argument, "text: ", text.size(),
                    " bytes split into ", train, " training and ", heldout,
                    " held-out bytes; each part needs at least context + 1 = ", context + 1);
  std::size_t windows = (heldout - 1) / context;
  if (eval_limit > 0 && eval_limit < windows) windows = eval_limit;
  return std::unique_ptr<TextDataset>(new TextDataset(text.substr(0, train), text.substr(train), context, windows));
}

TextDataset::TextDataset(std::string train, std::string heldout, std::size_t context, std::size_t eval_windows)
    : train_(std::move(train)), heldout_(std::move(heldout)), context_(context), eval_windows_(eval_windows) {}

void TextDataset::fill(const std::string& text, std::span<const std::size_t> starts, Batch& batch) const {
  batch.samples = starts.size();
  batch.features.clear();
  batch.tokens.resize(starts.size() * context_);
  batch.targets.resize(starts.size() * context_);
  for (std::size_t s = 0; s < starts.size(); ++s)
    for (std::size_t i = 0; i < context_; ++i) {
      batch.tokens[s * context_ + i] = static_cast<unsigned char>(text[starts[s] + i]);
      batch.targets[s * context_ + i] = static_cast<unsigned char>(text[starts[s] + i + 1]);
    }
}

void TextDataset::train_batch(std::span<const std::size_t> items, Batch& batch) const { fill(train_, items, batch); }

void TextDataset::eval_batch(std::span<const std::size_t> items, Batch& batch) const {
  std::vector<std::size_t> starts(items.begin(), items.end());
  for (std::size_t& s : starts) s *= context_;
  fill(heldout_, starts, batch);
}

std::string TextDataset::describe() const {
  return cat("text (", train_.size(), " training bytes, ", heldout_.size(), " held out, ", eval_windows_,
             " evaluation windows of ", context_, ")");
}

}  // namespace geoloco::inner
