// Byte-level text for the `gpt` model: the King James Bible by default
// (Debian package bible-kjv, whose `bible` program prints it), split into a
// training part and a held-out tail for evaluation.
//
// Training item j is the window starting at byte j of the training part:
// tokens = bytes[j, j+context), targets = bytes[j+1, j+context+1).
// Evaluation items are the non-overlapping windows of the held-out part.
#pragma once

#include <memory>
#include <string>

#include "inner/data/dataset.h"

namespace geoloco::inner {

/// The whole Bible, from running `bible "Gen1:1-Rev22:21"`.
/// Errors: io when the program is missing or fails (the message says to
/// install bible-kjv or pass a text file).
Result<std::string> run_bible();

/// Reads a text file (up to 1 GiB). Errors: io, too_large.
Result<std::string> read_text(const std::string& path);

class TextDataset final : public Dataset {
 public:
  /// Holds out the last `heldout_fraction` of `text` (the tail, so no
  /// evaluation window overlaps a training one). Errors: invalid_argument
  /// when either part is shorter than context + 1 bytes, or the fraction is
  /// outside (0, 1).
  static Result<std::unique_ptr<TextDataset>> create(std::string text, std::size_t context,
                                                     double heldout_fraction = 0.05, std::size_t eval_limit = 0);

  std::size_t train_items() const override { return train_.size() - context_; }
  std::size_t eval_items() const override { return eval_windows_; }
  void train_batch(std::span<const std::size_t> items, Batch& batch) const override;
  void eval_batch(std::span<const std::size_t> items, Batch& batch) const override;
  std::string describe() const override;
  bool epochs() const override { return false; }

 private:
  TextDataset(std::string train, std::string heldout, std::size_t context, std::size_t eval_windows);
  void fill(const std::string& text, std::span<const std::size_t> starts, Batch& batch) const;

  std::string train_;
  std::string heldout_;
  std::size_t context_;
  std::size_t eval_windows_;
};

}  // namespace geoloco::inner
