#!/usr/bin/env python3
"""Writes the seed corpora of fuzz/corpus/ (small valid inputs of each reader), byte for byte as
cleave writes them: .ckpt and .safetensors with cleave's CRC32C (NOTE [Checkpoint checksums]),
IDX and CIFAR-10 batches, rank tables, a strategy file, IR text, environment lines and planner
bytes. Run from anywhere: python3 fuzz/make_seeds.py."""
import json
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CORPUS = os.path.join(HERE, "corpus")


def crc32c(data, crc=0xFFFFFFFF):
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
    return crc


# (name, ckpt dtype, safetensors dtype, shape, raw little-endian bytes)
TENSORS = [
    ("fc.weight", "Float32", "F32", [2, 3], struct.pack("<6f", 1, -2, 0.5, 3, 0, -0.25)),
    ("fc.bias", "Float32", "F32", [3], struct.pack("<3f", 0.1, 0.2, 0.3)),
    ("global_step", "Int32", "I32", [1], struct.pack("<i", 7)),
    ("step_num", "Int64", "I64", [], struct.pack("<q", 42)),
    ("mask", "Bool", "BOOL", [4], bytes([0, 1, 1, 0])),
    ("scale", "Float64", "F64", [1], struct.pack("<d", 1.5)),
]


def checksum(tensors):
    crc = 0xFFFFFFFF
    for name, ckpt_type, _, shape, raw in sorted(tensors):
        crc = crc32c(name.encode() + b"\0", crc)
        crc = crc32c(ckpt_type.encode() + b"\0", crc)
        for d in shape:
            crc = crc32c(struct.pack("<q", d), crc)
        crc = crc32c(raw, crc)
    return crc ^ 0xFFFFFFFF


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(number, wire, payload):
    key = varint(number << 3 | wire)
    if wire == 2:
        return key + varint(len(payload)) + payload
    return key + payload


def ckpt(tensors, with_crc=True):
    out = b""
    if with_crc:
        out += field(100, 5, struct.pack("<I", checksum(tensors)))
    for name, ckpt_type, _, shape, raw in tensors:
        tp = b"".join(field(1, 0, varint(d)) for d in shape)
        tp += field(2, 2, ckpt_type.encode()) + field(3, 2, raw)
        out += field(1, 2, field(1, 2, name.encode()) + field(2, 2, tp))
    return out


def safetensors(tensors, metadata=None, with_crc=True):
    header = {}
    meta = dict(metadata or {})
    if with_crc:
        meta["cleave.crc32c"] = "%08x" % checksum(tensors)
    if meta:
        header["__metadata__"] = meta
    offset = 0
    for name, _, st_type, shape, raw in tensors:
        header[name] = {"dtype": st_type, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(t[4] for t in tensors)


def write(target, name, data):
    d = os.path.join(CORPUS, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def main():
    shutil.rmtree(CORPUS, ignore_errors=True)
    write("checkpoint_ckpt", "all_dtypes.ckpt", ckpt(TENSORS))
    write("checkpoint_ckpt", "no_checksum.ckpt", ckpt(TENSORS[:2], with_crc=False))
    write("checkpoint_ckpt", "one_scalar.ckpt", ckpt(TENSORS[3:4]))
    write("checkpoint_safetensors", "all_dtypes.safetensors", safetensors(TENSORS, {"step": "3"}))
    write("checkpoint_safetensors", "no_checksum.safetensors", safetensors(TENSORS[:2], with_crc=False))
    write("checkpoint_safetensors", "empty_shape.safetensors",
          safetensors([("e", "Float32", "F32", [0, 3], b"")]))

    # Rank tables: the two layouts of src/cluster/rank_table.h.
    write("rank_table", "group_list.json", json.dumps({"group_list": [{"instance_list": [
        {"rank_id": "0", "server_id": "10.0.0.1", "devices": [{"device_id": "0"}]},
        {"rank_id": "1", "server_id": "10.0.0.2", "devices": [{"device_id": "0"}]}]}]}, indent=1))
    write("rank_table", "server_list.json", json.dumps({"server_list": [
        {"server_id": "10.0.0.1", "device": [{"device_id": "0", "rank_id": "0"},
                                             {"device_id": "1", "rank_id": "1"}]},
        {"server_id": "10.0.0.2", "device": [{"device_id": "0", "rank_id": "2"},
                                             {"device_id": "1", "rank_id": "3"}]}]}, indent=1))

    # A strategy file for the network of fuzz/strategy_file_fuzzer.cc on 8 devices.
    scope = "Default/network-WithLossCell/"
    write("strategy_file", "matmul_2x4.json", json.dumps({
        "format": "cleave-strategy", "version": 1, "device_num": 8, "current_stage": 0,
        "parallel_strategy_item": {
            scope + "_backbone-TinyNet/MatMul-_backbone.matmul":
                {"stage": 0, "parallel_strategy": [[2, 4], [4, 1]], "derived": False},
            scope + "_backbone-TinyNet/ReLU-_backbone.relu":
                {"stage": 0, "parallel_strategy": [[2, 1]], "derived": True}},
        "parallel_layout_item": {
            "_backbone.w": {"dev_matrix": [2, 4, 1], "tensor_map": [[1], []],
                            "tensor_shape": [16, 8], "layout": "layout(dev=[2, 4, 1], map=(1, -1))"}}},
        indent=1))

    # IR text: the golden dumps of tests/ir/golden.
    golden = os.path.join(ROOT, "tests", "ir", "golden")
    for name in ("01_trace.ir", "08_autodiff.ir", "11_optimizer.ir", "20_execute.ir"):
        with open(os.path.join(golden, name)) as f:
            write("ir_text", name, f.read())

    for i, text in enumerate(["((2, 4), (4, 1))", "((8), ())", "layout(dev=[2, 4, 1], map=(0, -1))",
                              "layout(dev=[2, 4], map=((0, 1), -1), partial=(1))",
                              "layout(dev=[8], map=(), partial=(0))"]):
        write("text_forms", "seed%d.txt" % i, text)

    # MNIST: the first byte is the label file's length / 4 (fuzz/mnist_fuzzer.cc).
    images = struct.pack(">IIII", 0x803, 4, 28, 28) + bytes(range(256)) * 12 + bytes(64)
    labels = struct.pack(">II", 0x801, 4) + bytes([3, 1, 4, 1]) + bytes(0)
    labels += b"\0" * ((4 - len(labels) % 4) % 4)
    write("mnist", "four_images", bytes([len(labels) // 4]) + images + labels)
    write("mnist", "bad_label", bytes([3]) + struct.pack(">IIII", 0x803, 1, 2, 2) + bytes(4) +
          struct.pack(">II", 0x801, 1) + bytes([11, 0, 0, 0]))
    write("cifar10", "two_records.bin", bytes([7]) + bytes(range(256)) * 12 + bytes([2]) + bytes(3072))

    # Environment lines: <byte picking the variable><value> (fuzz/env_fuzzer.cc).
    write("env", "defaults", "")
    write("env", "numbers", "".join(chr(i) + v + "\n" for i, v in enumerate(
        ["auto", "1", "64", "300000", "2048", "1000", "10000", "tok", "29500", "0", "2000", "1", "0",
         "MS_WORKER", "8118", "4", "2", "600", "127.0.0.1"])))
    write("env", "bad", "\x02abc\n\x0d-1\n\x0e99999999999999999999\n")

    # Planner bytes (fuzz/planner_fuzzer.cc): [2, 4] -> [8], (8, 16).
    write("planner", "seed0", bytes([0, 1, 0, 1, 0, 3, 0, 1, 0, 1, 0, 2, 0, 7, 0, 15, 0, 1, 0, 0, 0, 0, 0, 0]))
    write("planner", "seed1", bytes(range(40)))


if __name__ == "__main__":
    main()
