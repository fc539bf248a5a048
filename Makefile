# animegan.c - one Makefile, everything written under build/.
#
# Make rather than CMake: one library, one binary, a handful of tests and no platform
# matrix; dependencies come from pkg-config (vips, libpng, libjpeg, libwebp, libexif, hiredis,
# libmicrohttpd, libzip, libcjson) and -ldnnl, which a 100-line Makefile states more plainly
# than a CMake project would.
#
#   make                 build/animegan and build/libanimegan.a
#   make test            build and run the whole test suite (prints "N passed, N failed")
#   make check           the fast part: unit, golden and CLI test binaries (a few minutes)
#   make format-check    fail when a C file is not as clang-format writes it (CI runs it)
#   make SANITIZER=address test   the same under ASan + UBSan, in build/asan/
#   make valgrind        memcheck of one `animegan convert`
#   make format          clang-format every C file
#   make install         PREFIX=/usr/local DESTDIR=: the binary, the bundled models where it
#                        finds them (PREFIX/share/animegan/models), the systemd units, the
#                        nginx snippet and the man pages (tools/make_man.sh); make uninstall

CC ?= cc
SANITIZER ?=
ifeq ($(SANITIZER),)
BUILD ?= build
SAN_FLAGS =
else
BUILD ?= build/$(SANITIZER)
SAN_FLAGS = -fsanitize=$(SANITIZER),undefined -fno-sanitize-recover=all -fno-omit-frame-pointer
# GCC 12's -Wstringop-overflow misreads array parameters (float[6][2] as 8 bytes) under the
# sanitizers' instrumentation only (src/face/mesh.c): a warning there, still an error in the
# plain build, which sees the same code without it.
SAN_FLAGS += -Wno-error=stringop-overflow
endif

# FFmpeg's libraries are not linked: src/video/libav.c loads them on first use (a photo
# would otherwise pay ~20 MB of RSS for them); their headers are still needed.
LINK_PKGS = vips libpng libjpeg libwebp libwebpdemux libwebpmux libexif libmicrohttpd libzip libcjson hiredis
VIDEO_PKGS = libavformat libavcodec libavutil libswscale libswresample libavfilter
PKGS = $(LINK_PKGS) $(VIDEO_PKGS)
PKG_CFLAGS := $(shell pkg-config --cflags $(PKGS) 2>/dev/null)
PKG_LIBS := $(shell pkg-config --libs $(LINK_PKGS) 2>/dev/null)

WARNINGS = -Wall -Wextra -Werror -Wshadow -Wstrict-prototypes -Wmissing-prototypes \
           -Wdouble-promotion
CFLAGS ?= -O2 -g
# -fPIC: the Python extension (python/) links libanimegan.a into a shared object.
ALL_CFLAGS = -std=c11 -D_GNU_SOURCE $(CFLAGS) $(WARNINGS) -fopenmp -pthread -fPIC $(SAN_FLAGS) \
             -Iinclude $(PKG_CFLAGS) -DAG_SOURCE_DIR='"$(CURDIR)"'
LDLIBS = $(PKG_LIBS) -ldnnl -lm
ALL_LDFLAGS = $(LDFLAGS) -fopenmp -pthread $(SAN_FLAGS)

# The fused passes (src/kernels/fused.c) are compiled once per ISA variant, each with its
# -march level and -DAG_FUSED_ISA=name; src/kernels/fused_dispatch.c picks one at start-up
# from the CPU (ANIMEGAN_ISA=avx2|generic forces a lower one). Elsewhere than x86-64: one.
FUSED_SRC := src/kernels/fused.c
ifneq ($(filter x86_64%,$(shell $(CC) -dumpmachine)),)
FUSED_ISAS := avx512 avx2 generic
else
FUSED_ISAS := generic
endif
FUSED_FLAGS_avx512 := -march=x86-64-v4 -mtune=generic
FUSED_FLAGS_avx2 := -march=x86-64-v3 -mtune=generic
FUSED_FLAGS_generic :=
FUSED_OBJ := $(FUSED_ISAS:%=$(BUILD)/obj/src/kernels/fused.%.o)

LIB_SRC := $(filter-out $(FUSED_SRC),$(shell find src -name '*.c' | sort))
APP_SRC := $(wildcard cli/*.c) $(wildcard server/*.c)
TEST_SRC := $(wildcard tests/test_*.c)
LIB_OBJ := $(LIB_SRC:%.c=$(BUILD)/obj/%.o) $(FUSED_OBJ)
APP_OBJ := $(APP_SRC:%.c=$(BUILD)/obj/%.o)
TEST_BIN := $(TEST_SRC:tests/%.c=$(BUILD)/tests/%)
# Test-time generator of hostile and worst-case images (tests/stability/hardening.py).
TEST_TOOLS := $(BUILD)/tools/make_attack_images $(BUILD)/tools/webp_frames
GEN_SRC :=

-include server/web.mk

.PHONY: install uninstall test-container all test v3-test-models check check-deps valgrind format format-check clean fuzz bench soak load
all: check-deps $(BUILD)/animegan $(TEST_BIN) $(TEST_TOOLS)

check-deps:
	@pkg-config --exists $(PKGS) || { echo "missing libraries: run scripts/install-deps.sh"; exit 1; }
	@test -f /usr/include/dnnl.h || { echo "missing oneDNN: run scripts/install-deps.sh"; exit 1; }

$(BUILD)/obj/%.o: %.c
	@mkdir -p $(dir $@)
	@echo "  CC      $<"
	@$(CC) $(ALL_CFLAGS) -MMD -MP -c $< -o $@

$(FUSED_OBJ): $(BUILD)/obj/src/kernels/fused.%.o: $(FUSED_SRC)
	@mkdir -p $(dir $@)
	@echo "  CC      $< ($*)"
	@$(CC) $(ALL_CFLAGS) $(FUSED_FLAGS_$*) -DAG_FUSED_ISA=$* -MMD -MP -c $< -o $@

$(BUILD)/libanimegan.a: $(LIB_OBJ)
	@rm -f $@
	ar rcs $@ $^

$(BUILD)/animegan: $(APP_OBJ) $(GEN_OBJ) $(BUILD)/libanimegan.a
	$(CC) $(ALL_LDFLAGS) -o $@ $^ $(LDLIBS)

# Some tests #include the server's or the library's sources: they are prerequisites too.
$(BUILD)/tests/%: tests/%.c $(BUILD)/libanimegan.a tests/test.h $(wildcard server/*.[ch] src/util/*.c)
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) $(ALL_CFLAGS) -Itests -o $@ $< $(BUILD)/libanimegan.a $(ALL_LDFLAGS) $(LDLIBS)

# One layer in fp32, bf16 and int8 on oneDNN (bench/int8_conv.c); not built by `all`.
$(BUILD)/bench/int8_conv: bench/int8_conv.c $(BUILD)/libanimegan.a
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) $(ALL_CFLAGS) -o $@ $< $(BUILD)/libanimegan.a $(ALL_LDFLAGS) $(LDLIBS)

# GPEN's decoder convs in int8, bf16, fp32 Winograd and fp32 direct (bench/conv_kinds.c);
# not built by `all`.
$(BUILD)/bench/conv_kinds: bench/conv_kinds.c
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) $(ALL_CFLAGS) -o $@ $< $(ALL_LDFLAGS) $(LDLIBS)

$(BUILD)/tools/make_attack_images: tools/make_attack_images.c
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) $(ALL_CFLAGS) -o $@ $< $(ALL_LDFLAGS) $(PKG_LIBS) -lz -lm

# Test-time reader of animated WebP (tests/video_test.sh): libwebp alone.
$(BUILD)/tools/webp_frames: tools/webp_frames.c
	@mkdir -p $(dir $@)
	@echo "  CC      $@"
	@$(CC) $(ALL_CFLAGS) -o $@ $< $(ALL_LDFLAGS) $(PKG_LIBS)

# The ONNX test models of the v3 fixtures are made from files in the repository (seconds).
v3-test-models:
	sh tools/make_v3_test_models.sh

test: all v3-test-models
	BUILD=$(BUILD) tests/run.sh

# The fast subset: the C test binaries (unit, golden, CLI), no server or stability suites.
check: all v3-test-models
	BUILD=$(BUILD) QUICK=1 tests/run.sh

# The container recipe built from Debian's packages and run with podman (minutes; root;
# scripts/install-deps.sh --container): not part of `make test`.
test-container: check-deps $(BUILD)/animegan
	BUILD=$(BUILD) tests/container_test.sh

valgrind: all
	BUILD=$(BUILD) tests/valgrind.sh

# libFuzzer targets (clang): FUZZ_SECONDS per target; corpora kept under build/fuzz/.
FUZZ_SECONDS ?= 20
fuzz:
	fuzz/run.sh $(FUZZ_SECONDS)

# Soak and load of `animegan serve` (docs/stability.md); SOAK_ARGS / LOAD_ARGS add options.
# Speed against PyTorch and ONNX Runtime in one run (minutes; BENCH_ARGS="--rounds 5").
bench: check-deps $(BUILD)/animegan
	bench/compare.sh $(BENCH_ARGS)

soak: check-deps $(BUILD)/animegan
	BUILD=$(BUILD) bench/soak.sh $(SOAK_ARGS)

load: check-deps $(BUILD)/animegan
	BUILD=$(BUILD) bench/load.sh $(LOAD_ARGS)

format:
	clang-format -i $$(find include src cli server tests tools fuzz python/animegan -name '*.[ch]')

# What CI checks: every C file as clang-format would write it.
format-check:
	clang-format --dry-run -Werror $$(find include src cli server tests tools fuzz python/animegan -name '*.[ch]')

clean:
	rm -rf build

# Installed layout. The binary finds its models at <bin>/../share/animegan/models; the units
# name PREFIX's binary; nginx's snippet is a file to copy into /etc/nginx/conf.d/ (it listens
# on port 80, so it is not enabled by installing).
PREFIX ?= /usr/local
BINDIR = $(PREFIX)/bin
SHAREDIR = $(PREFIX)/share/animegan
MANDIR = $(PREFIX)/share/man/man1
UNITDIR = $(PREFIX)/lib/systemd/system
INSTALLED_MODELS = $(wildcard models/*.safetensors) $(wildcard models/LICENSE*) models/README.md
MAN_PAGES = animegan animegan-convert animegan-restore animegan-upscale animegan-fuse \
            animegan-faces animegan-models animegan-bench animegan-serve

install: check-deps $(BUILD)/animegan
	install -d $(DESTDIR)$(BINDIR) $(DESTDIR)$(SHAREDIR)/models $(DESTDIR)$(SHAREDIR)/nginx \
	    $(DESTDIR)$(UNITDIR) $(DESTDIR)$(MANDIR)
	install -m 755 $(BUILD)/animegan $(DESTDIR)$(BINDIR)/animegan
	install -m 644 $(INSTALLED_MODELS) $(DESTDIR)$(SHAREDIR)/models/
	for u in animegan.service animegan@.service; do \
	    sed 's#/usr/local/bin/animegan#$(BINDIR)/animegan#' contrib/systemd/$$u \
	        >$(DESTDIR)$(UNITDIR)/$$u && chmod 644 $(DESTDIR)$(UNITDIR)/$$u || exit 1; done
	install -m 644 contrib/nginx/animegan.conf $(DESTDIR)$(SHAREDIR)/nginx/
	sh tools/make_man.sh $(BUILD)/animegan $(DESTDIR)$(MANDIR)

uninstall:
	rm -f $(DESTDIR)$(BINDIR)/animegan $(DESTDIR)$(UNITDIR)/animegan.service \
	    $(DESTDIR)$(UNITDIR)/animegan@.service $(DESTDIR)$(SHAREDIR)/nginx/animegan.conf \
	    $(INSTALLED_MODELS:models/%=$(DESTDIR)$(SHAREDIR)/models/%) \
	    $(MAN_PAGES:%=$(DESTDIR)$(MANDIR)/%.1)
	-rmdir $(DESTDIR)$(SHAREDIR)/models $(DESTDIR)$(SHAREDIR)/nginx $(DESTDIR)$(SHAREDIR) \
	    2>/dev/null

-include $(LIB_OBJ:.o=.d) $(APP_OBJ:.o=.d)
