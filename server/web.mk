# server/web.mk - included by the root Makefile: embeds the web page (server/web/*) into
# the binary. embed.sh writes the bytes as C arrays into $(BUILD)/gen/web_assets.c, which is
# compiled and linked into build/animegan next to server/*.o; nothing is read from disk at
# run time.

# Included before the root Makefile's `all`: keep it the default goal.
.DEFAULT_GOAL := all

WEB_FILES := $(sort $(wildcard server/web/*.html server/web/*.css server/web/*.js server/web/*.svg \
                            server/web/*.jpg))
WEB_GEN := $(BUILD)/gen/web_assets.c
WEB_OBJ := $(BUILD)/obj/gen/web_assets.o
GEN_SRC += $(WEB_GEN)
GEN_OBJ += $(WEB_OBJ)

$(WEB_GEN): $(WEB_FILES) server/embed.sh server/web.mk
	@mkdir -p $(dir $@)
	sh server/embed.sh $(WEB_FILES) > $@.tmp && mv $@.tmp $@

$(WEB_OBJ): $(WEB_GEN) server/server.h
	@mkdir -p $(dir $@)
	$(CC) $(ALL_CFLAGS) -Iserver -c $< -o $@
