#!/usr/bin/env python3
"""make_video_bombs.py - the small hostile videos of issue 17 (findings 1-3), made at test time
from a clip of tools/make_test_clips.sh and Debian's ffmpeg (nothing binary is committed):

  make_video_bombs.py CLIP.mp4 DIR [WEBP_FRAMES]

writes into DIR:
  samples_85m.mp4   CLIP with its video track's tables rewritten to declare 85,000,000
                    samples of 1 byte and duration 1 (stts one entry, stsz a constant size):
                    the same few kB, but libavformat's mov demuxer would build a 2 GB index
                    while opening it
  frames_70k.webp   an animated WebP of WEBP_FRAMES (default 70,000) empty 16x16 frames on a
                    64x64 canvas, ~40 bytes each: libwebp's demuxer finds each frame by
                    walking its list from the first (quadratic)
  audio_hour.mkv    1 s of 64x48 video with an hour of 8 kHz FLAC silence
  audio_hour.mp4    the same as MP4 with ALAC (the video track declares its own 1 s)
Offline and test tool only.
"""

import os
import struct
import subprocess
import sys
import tempfile


def ff(*args):
    subprocess.run(["ffmpeg", "-nostdin", "-hide_banner", "-loglevel", "error", "-y", *args],
                   check=True)


def boxes(data, start, end):
    """(type, offset, header size, total size) of the boxes in data[start:end]."""
    pos = start
    while pos + 8 <= end:
        size, kind = struct.unpack(">I4s", data[pos:pos + 8])
        header = 8
        if size == 1:
            size = struct.unpack(">Q", data[pos + 8:pos + 16])[0]
            header = 16
        elif size == 0:
            size = end - pos
        yield kind.decode("latin-1"), pos, header, size
        pos += size


def find(data, start, end, path):
    for kind, pos, header, size in boxes(data, start, end):
        if kind == path[0]:
            if len(path) == 1:
                yield pos, header, size
            else:
                yield from find(data, pos + header, pos + size, path[1:])


def samples_bomb(clip, out, samples=85_000_000):
    data = bytearray(open(clip, "rb").read())
    moov = next(find(data, 0, len(data), ["moov"]))
    for trak, th, ts in find(data, moov[0] + moov[1], moov[0] + moov[2], ["trak"]):
        hdlr = next(find(data, trak + th, trak + ts, ["mdia", "hdlr"]))
        if data[hdlr[0] + hdlr[1] + 8:hdlr[0] + hdlr[1] + 12] != b"vide":
            continue
        stbl = next(find(data, trak + th, trak + ts, ["mdia", "minf", "stbl"]))
        body, end = stbl[0] + stbl[1], stbl[0] + stbl[2]
        stts = next(find(data, body, end, ["stts"]))
        p = stts[0] + stts[1]
        struct.pack_into(">IIII", data, p, 0, 1, samples, 1)  # version/flags, 1 entry
        stsz = next(find(data, body, end, ["stsz"]))
        struct.pack_into(">III", data, stsz[0] + stsz[1], 0, 1, samples)  # constant size 1
        break
    else:
        sys.exit("make_video_bombs: no video track in " + clip)
    open(out, "wb").write(data)


def webp_frames_bomb(out, frames):
    with tempfile.TemporaryDirectory() as tmp:
        tiny = os.path.join(tmp, "tiny.webp")
        ff("-f", "lavfi", "-i", "color=c=black:s=16x16", "-frames:v", "1", "-c:v", "libwebp",
           "-lossless", "1", tiny)
        data = open(tiny, "rb").read()
    chunk = next((data[p:p + s + (s & 1) + 8] for kind, p, h, s in riff_chunks(data)
                  if kind in ("VP8L", "VP8 ")), None)
    if chunk is None:
        sys.exit("make_video_bombs: ffmpeg wrote no VP8L chunk")
    # ANMF: X/2, Y/2, width - 1, height - 1, duration (24 bits each), flags; then the frame.
    payload = struct.pack("<I", 0)[:3] * 2 + struct.pack("<I", 15)[:3] * 2
    payload += struct.pack("<I", 40)[:3] + b"\x00" + chunk
    anmf = b"ANMF" + struct.pack("<I", len(payload)) + payload + (b"\x00" if len(payload) & 1
                                                                   else b"")
    vp8x = b"VP8X" + struct.pack("<I", 10) + bytes([0x02, 0, 0, 0]) + \
        struct.pack("<I", 63)[:3] + struct.pack("<I", 63)[:3]
    anim = b"ANIM" + struct.pack("<I", 6) + b"\xff\xff\xff\xff" + struct.pack("<H", 0)
    body = b"WEBP" + vp8x + anim + anmf * frames
    open(out, "wb").write(b"RIFF" + struct.pack("<I", len(body)) + body)


def riff_chunks(data):
    pos = 12
    while pos + 8 <= len(data):
        kind = data[pos:pos + 4].decode("latin-1")
        size = struct.unpack("<I", data[pos + 4:pos + 8])[0]
        yield kind, pos, 8, size
        pos += 8 + size + (size & 1)


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    clip, out = sys.argv[1], sys.argv[2]
    frames = int(sys.argv[3]) if len(sys.argv) > 3 else 70_000
    os.makedirs(out, exist_ok=True)
    samples_bomb(clip, os.path.join(out, "samples_85m.mp4"))
    webp_frames_bomb(os.path.join(out, "frames_70k.webp"), frames)
    ff("-f", "lavfi", "-t", "1", "-i", "testsrc=size=64x48:rate=10", "-f", "lavfi", "-t", "3600",
       "-i", "anullsrc=r=8000:cl=mono", "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "flac",
       os.path.join(out, "audio_hour.mkv"))
    # The same in MP4, whose header gives the video track its own 1 s: only the audio
    # track's duration says what the demuxer would read.
    ff("-f", "lavfi", "-t", "1", "-i", "testsrc=size=64x48:rate=10", "-f", "lavfi", "-t", "3600",
       "-i", "anullsrc=r=8000:cl=mono", "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "alac",
       os.path.join(out, "audio_hour.mp4"))


if __name__ == "__main__":
    main()
