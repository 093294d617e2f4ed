// Training checkpoints (`convgen train --checkpoint DIR`, `--resume DIR`): everything
// needed to continue a run bit-identically to one that was never interrupted -- the
// trainable tensors and their momentum buffers, other training state tensors (e.g.
// BatchNormalization running statistics), the step, epoch and position in the epoch's
// sample order, the RNG seed, the learning-rate schedule's state -- and a hash of the
// model file and the options that must not change across a resume.
//
// File: DIR/checkpoint.cgck, written atomically (a temporary file in DIR, fsync, rename
// over the old checkpoint, fsync of DIR): a crash or SIGKILL at any moment leaves either
// the previous checkpoint or the new one, never a partial file. Format (little-endian):
//   magic "CGCKPT\0\0" (8 bytes), u32 version (1), u32 reserved 0,
//   u64 header bytes H, then H bytes of JSON (the scalar state and the tensor directory:
//   name, kind, shape, byte offset and length in the payload, CRC-32 of each tensor),
//   u64 payload bytes P, then P bytes of float32 tensor data, u32 CRC-32 of everything
//   before it.
// The header JSON is one object: "model_sha256", "options_hash", "options_text"
// (strings), "step", "epoch", "position" (integers), "seed" (unsigned integer), "lr_bits"
// (the IEEE-754 bit pattern of lr as 16 lower-case hex digits, so it round-trips exactly,
// NaN included), "extra" (object of strings) and "tensors": an array, in the order of
// Checkpoint::tensors, of {"name", "kind", "shape", "offset", "bytes", "crc32"}. The
// payload holds the tensors back to back in that order (offsets 0, bytes0, ...), each
// value the little-endian bit pattern of the float, so a round trip is bit-exact (NaN
// payloads, -0.0). The same Checkpoint always gives the same bytes.
// Reading checks magic, version, sizes and every CRC; any mismatch is a BadData error
// naming the file and what is wrong ("... checkpoint.cgck: truncated", "...: CRC mismatch
// in tensor 'conv1_w'").
// A saver killed between creating and renaming its temporary leaves
// DIR/.checkpoint.cgck.tmp.<pid> behind; loading ignores such files, and a later save by
// a process of the same pid overwrites it.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace convgen::train {

struct CheckpointTensor {
  std::string name;
  std::string kind;               // "value", "momentum", "state"
  std::vector<int64_t> shape;
  std::vector<float> data;
};

struct Checkpoint {
  static constexpr uint32_t kVersion = 1;
  std::string model_sha256;       // of the model file
  std::string options_hash;       // of the options a resume must keep (hex)
  std::string options_text;       // those options in words, for the mismatch message
  int64_t step = 0;               // optimisation steps taken
  int64_t epoch = 0;              // epoch of the next step
  int64_t position = 0;           // samples of that epoch already consumed
  uint64_t seed = 0;
  double lr = 0.0;                // the learning rate in force
  std::map<std::string, std::string> extra;  // free-form scalar state (string values)
  std::vector<CheckpointTensor> tensors;
};

// DIR/checkpoint.cgck
std::string checkpoint_path(const std::string& dir);

// Creates DIR if needed; writes atomically as described above. Io error naming the path
// (DIR when it cannot be created, else DIR/checkpoint.cgck) if DIR cannot be created or
// the file cannot be written; the previous checkpoint is then left intact (unless only
// the final fsync of DIR failed, after the rename: the new one is in place but perhaps
// not yet durable). A checkpoint that could not be read back is refused before anything
// is written: Internal for a tensor whose data does not match its shape, of an unknown
// kind, or whose (name, kind) appears twice; Unsupported for a string that is not valid
// UTF-8 (JSON cannot carry it). Not for concurrent saves to the same DIR from one
// process (they share the temporary's name).
void save_checkpoint(const std::string& dir, const Checkpoint& c);

// BadData (naming the file and the fault, one line) for a missing, truncated, corrupted
// or foreign file, or a version this convgen does not read ("...: checkpoint version 2
// is not supported (this convgen reads 1)").
Checkpoint load_checkpoint(const std::string& dir);
// DIR/checkpoint.cgck's bytes, unchecked (errors as load_checkpoint's for a missing or
// unreadable file); and load_checkpoint from such bytes, for a rank that received them
// from the rank that read the file (`path` names the file in messages).
std::string read_checkpoint_file(const std::string& dir);
Checkpoint parse_checkpoint(const std::string& bytes, const std::string& path);

// CRC-32 (IEEE 802.3, zlib's crc32) of bytes.
uint32_t crc32_of(const void* data, size_t bytes, uint32_t start = 0);

}  // namespace convgen::train
