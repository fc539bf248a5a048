#!/bin/sh
# make_test_images.sh - regenerate tests/data/generated/, the small special-case images that
# tests/test_image.c decodes: orientation, grey, grey+alpha, 16-bit, palette, RGBA, CMYK,
# animations, WebP with EXIF, ICC and an offset first frame, TIFF, HEIF, tiny and thin
# images, a lying PNG header and a truncated PNG.
#
# Offline tool, not part of the build: needs the vips CLI (Debian libvips-tools), Ghostscript's
# ICC profiles (libgs-common) and python3 (standard library only, for the byte-level files
# libvips will not write). The outputs are committed, so the tests need none of these. Each
# file is a few kB at most; most are flat colours so the tests can check pixel values.
set -eu
cd "$(dirname "$0")/.."
out=tests/data/generated
mkdir -p "$out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# solid W H "R G B ..." FILE: a flat uchar image with one value per band.
solid() {
    nb=$(echo "$3" | wc -w)
    vips black "$tmp/black.v" "$1" "$2" --bands "$nb"
    vips linear "$tmp/black.v" "$4" "1" "$3" --uchar
}

# JPEG with EXIF orientation 6 ("rotate 90 clockwise to display"): stored 48x32, left half
# red and right half blue, so the decoder must return 32x48 with red on top. libvips writes
# EXIF only from its own metadata, so the APP1 segment is spliced in after SOI by hand.
solid 24 32 "255 0 0" "$tmp/red.v"
solid 24 32 "0 0 255" "$tmp/blue.v"
vips join "$tmp/red.v" "$tmp/blue.v" "$tmp/rb.v" horizontal
vips jpegsave "$tmp/rb.v" "$tmp/rb.jpg" --Q 95 --strip
python3 - "$tmp/rb.jpg" "$out/orient6.jpg" <<'EOF'
import struct, sys
jpeg = open(sys.argv[1], "rb").read()
assert jpeg[:2] == b"\xff\xd8"
# Big-endian TIFF header, one IFD entry: Orientation (0x0112) SHORT 1 = 6.
tiff = b"MM\x00\x2a" + struct.pack(">I", 8) + struct.pack(">H", 1)
tiff += struct.pack(">HHIHH", 0x0112, 3, 1, 6, 0) + struct.pack(">I", 0)
body = b"Exif\x00\x00" + tiff
app1 = b"\xff\xe1" + struct.pack(">H", len(body) + 2) + body
open(sys.argv[2], "wb").write(jpeg[:2] + app1 + jpeg[2:])
EOF

# Grey, grey+alpha, RGBA, 16-bit RGB, 16-bit grey.
solid 40 30 "100" "$tmp/g.v"
vips pngsave "$tmp/g.v" "$out/grey.png" --strip
solid 40 30 "100 128" "$tmp/ga.v"
vips copy "$tmp/ga.v" "$tmp/ga2.v" --interpretation b-w
vips pngsave "$tmp/ga2.v" "$out/grey_alpha.png" --strip
solid 20 30 "10 20 30 0" "$tmp/clear.v"
solid 20 30 "10 20 30 200" "$tmp/opaque.v"
vips join "$tmp/clear.v" "$tmp/opaque.v" "$tmp/rgba.v" horizontal
vips pngsave "$tmp/rgba.v" "$out/rgba.png" --strip
vips black "$tmp/b3.v" 40 30 --bands 3
vips linear "$tmp/b3.v" "$tmp/rgb16f.v" "1" "32896 16448 65535"
vips cast "$tmp/rgb16f.v" "$tmp/rgb16u.v" ushort
vips copy "$tmp/rgb16u.v" "$tmp/rgb16.v" --interpretation rgb16
vips pngsave "$tmp/rgb16.v" "$out/rgb16.png" --strip
vips black "$tmp/b1.v" 40 30
vips linear "$tmp/b1.v" "$tmp/g16f.v" "1" "51400"
vips cast "$tmp/g16f.v" "$tmp/g16u.v" ushort
vips copy "$tmp/g16u.v" "$tmp/g16.v" --interpretation grey16
vips pngsave "$tmp/g16.v" "$out/grey16.png" --strip

# Palette PNG: four flat quadrants, quantised to an 8-bit palette (exact for 4 colours).
solid 20 15 "255 0 0" "$tmp/q1.v"
solid 20 15 "0 255 0" "$tmp/q2.v"
solid 20 15 "0 0 255" "$tmp/q3.v"
solid 20 15 "255 255 0" "$tmp/q4.v"
vips arrayjoin "$tmp/q1.v $tmp/q2.v $tmp/q3.v $tmp/q4.v" "$tmp/quad.v" --across 2
vips pngsave "$tmp/quad.v" "$out/palette.png" --palette --strip

# CMYK JPEGs of one flat CMYK value (0, 128, 255, 0), one with Ghostscript's 5 kB PostScript
# CMYK profile embedded (Debian libgs-common; libvips' built-in "cmyk" profile is 1 MB), one
# with no profile, which the decoder converts with libvips' built-in CMYK profile instead.
# The two profiles map the value to visibly different oranges, which is what the test checks.
cmyk_icc=/usr/share/color/icc/ghostscript/ps_cmyk.icc
vips black "$tmp/k.v" 64 48 --bands 4
vips linear "$tmp/k.v" "$tmp/k2.v" "1" "0 128 255 0" --uchar
vips copy "$tmp/k2.v" "$tmp/cmyk.v" --interpretation cmyk
vips jpegsave "$tmp/cmyk.v" "$out/cmyk_icc.jpg" --Q 95 --profile "$cmyk_icc"
vips jpegsave "$tmp/cmyk.v" "$out/cmyk.jpg" --Q 95 --strip

# Animations: three 24x16 frames, red, green, blue; the decoder must return the red one.
solid 24 16 "255 0 0" "$tmp/f1.v"
solid 24 16 "0 255 0" "$tmp/f2.v"
solid 24 16 "0 0 255" "$tmp/f3.v"
# (vips join, not arrayjoin: the 8.14 CLI crashes on arrayjoin --across 1)
vips join "$tmp/f1.v" "$tmp/f2.v" "$tmp/f12.v" vertical
vips join "$tmp/f12.v" "$tmp/f3.v" "$tmp/frames.v" vertical
vips gifsave "$tmp/frames.v" "$out/anim.gif" --page-height 16 --strip
vips webpsave "$tmp/frames.v" "$out/anim.webp" --page-height 16 --lossless --strip

# TIFF and HEIF (HEVC and AV1) of a flat colour.
solid 40 30 "50 100 150" "$tmp/c.v"
vips tiffsave "$tmp/c.v" "$out/rgb.tif" --compression deflate --strip
solid 64 48 "50 100 150" "$tmp/c64.v"
vips heifsave "$tmp/c64.v" "$out/rgb.heic" --compression hevc --Q 90 --strip
vips heifsave "$tmp/c64.v" "$out/rgb.avif" --compression av1 --Q 90 --strip

# WebP cases for the libwebp decoder (src/image/webp_load.c); python3 assembles the RIFF
# containers libvips will not write around the image chunks of simple WebP files.
# - orient6.webp: orient6.jpg's stored image, lossless, with an EXIF chunk (orientation 6).
# - a98.webp: the flat colour above with Adobe RGB (1998) embedded, which must be honoured.
# - anim_offset.webp: a 24x16 animation whose first frame is an 8x8 red square at (4, 2), so
#   the rest of the first canvas is transparent; the second frame is green, full size.
vips webpsave "$tmp/rb.v" "$tmp/rb.webp" --lossless --strip
vips webpsave "$tmp/c.v" "$out/a98.webp" --lossless \
    --profile /usr/share/color/icc/ghostscript/a98.icc
solid 8 8 "255 0 0" "$tmp/sq.v"
vips webpsave "$tmp/sq.v" "$tmp/sq.webp" --lossless --strip
vips webpsave "$tmp/f2.v" "$tmp/green.webp" --lossless --strip
python3 - "$tmp" "$out" <<'EOF'
import struct, sys
tmp, out = sys.argv[1:]
def chunk(kind, data):
    return kind + struct.pack("<I", len(data)) + data + b"\0" * (len(data) & 1)
def image_chunks(path):  # ALPH, VP8 and VP8L; not VP8X, EXIF, ...
    data = open(path, "rb").read()
    assert data[:4] == b"RIFF" and data[8:12] == b"WEBP"
    pos, kept = 12, b""
    while pos < len(data):
        size = struct.unpack("<I", data[pos + 4:pos + 8])[0]
        end = pos + 8 + size + (size & 1)
        if data[pos:pos + 4] in (b"ALPH", b"VP8 ", b"VP8L"):
            kept += data[pos:end]
        pos = end
    assert kept
    return kept
def u24(v):
    return struct.pack("<I", v)[:3]
def riff(flags, width, height, body):
    vp8x = chunk(b"VP8X", bytes([flags, 0, 0, 0]) + u24(width - 1) + u24(height - 1))
    payload = b"WEBP" + vp8x + body
    return b"RIFF" + struct.pack("<I", len(payload)) + payload
# Little-endian TIFF, one IFD entry: Orientation (0x0112) SHORT 1 = 6.
tiff = b"II*\0" + struct.pack("<I", 8) + struct.pack("<H", 1)
tiff += struct.pack("<HHIHH", 0x0112, 3, 1, 6, 0) + struct.pack("<I", 0)
open(out + "/orient6.webp", "wb").write(
    riff(0x08, 48, 32, image_chunks(tmp + "/rb.webp") + chunk(b"EXIF", tiff)))
def frame(x, y, w, h, path):
    head = u24(x // 2) + u24(y // 2) + u24(w - 1) + u24(h - 1) + u24(100) + bytes([0])
    return chunk(b"ANMF", head + image_chunks(path))
anim = chunk(b"ANIM", bytes([0, 0, 0, 0]) + struct.pack("<H", 0))
anim += frame(4, 2, 8, 8, tmp + "/sq.webp") + frame(0, 0, 24, 16, tmp + "/green.webp")
open(out + "/anim_offset.webp", "wb").write(riff(0x02 | 0x10, 24, 16, anim))
EOF

# Sizes at the AG_MIN_SIDE boundary, and a thin 10000x8 strip.
solid 1 1 "0 128 255" "$tmp/s1.v"
vips pngsave "$tmp/s1.v" "$out/size_1x1.png" --strip
solid 7 7 "0 128 255" "$tmp/s7.v"
vips pngsave "$tmp/s7.v" "$out/size_7x7.png" --strip
solid 8 8 "0 128 255" "$tmp/s8.v"
vips pngsave "$tmp/s8.v" "$out/size_8x8.png" --strip
solid 10000 8 "0 128 255" "$tmp/thin.v"
vips pngsave "$tmp/thin.v" "$out/thin_10000x8.png" --strip --compression 9

# A PNG whose header claims 50000x50000 and which has no pixel data: probe must answer from
# the header; decode must refuse it on max_pixels before touching (absent) pixels.
python3 - "$out/huge_header.png" <<'EOF'
import struct, sys, zlib
def chunk(kind, data):
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
ihdr = struct.pack(">IIBBBBB", 50000, 50000, 8, 2, 0, 0, 0)
# libpng reads the header up to the first IDAT, so give it one: a single row's worth.
idat = zlib.compress(bytes(1 + 3 * 50000))
png = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")
open(sys.argv[1], "wb").write(png)
EOF

# A noisy PNG cut in half: the header is intact (probe works), the pixels are not.
vips gaussnoise "$tmp/noise.v" 64 64 --mean 128 --sigma 40
vips cast "$tmp/noise.v" "$tmp/noise8.v" uchar
vips pngsave "$tmp/noise8.v" "$tmp/noise.png" --strip
size=$(wc -c <"$tmp/noise.png")
head -c $((size / 2)) "$tmp/noise.png" >"$out/truncated.png"

ls -l "$out"
