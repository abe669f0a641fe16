# tests/fuzz/fuzz.mk (included by the Makefile): fuzzing.
#
#   make fuzz [FUZZ_SECONDS=30] [FUZZ_ONLY="npy config"] [FUZZ_SEED=N]
# builds the libFuzzer harnesses tests/fuzz/fuzz_<name>.c with clang and ASan+UBSan into
# build-fuzz/ and runs each for FUZZ_SECONDS on a working copy of its committed seed corpus
# (tests/fuzz/corpus/<name>/); tests/fuzz/fuzz.sh prints executions per harness and fails on any
# finding (kept in build-fuzz/findings/<name>/; add it to the corpus once fixed). The same
# harnesses linked with tests/fuzz/replay.c (normal build, $(BUILD)/tests/fuzz/replay_<name>)
# replay the corpora in `make test`. The fuzz build compiles only the modules whose readers are
# fuzzed, so it does not depend on the engine's kernels.
FUZZ_SECONDS ?= 30
FUZZ_SEED    ?=
FUZZ_BUILD   := build-fuzz
FUZZ_CC      ?= clang
FUZZ_NAMES   := $(patsubst tests/fuzz/fuzz_%.c,%,$(wildcard tests/fuzz/fuzz_*.c))
FUZZ_SAN     := -fsanitize=address,undefined -fno-sanitize-recover=undefined
FUZZ_CFLAGS  := -std=c11 -D_GNU_SOURCE -O1 -g -fno-omit-frame-pointer $(FUZZ_SAN) \
                -fsanitize=fuzzer-no-link -Isrc -Iinclude -Itests/fuzz
FUZZ_LIB_SRCS := $(wildcard src/core/*.c) $(wildcard src/analyze/*.c) src/nn/safetensors.c \
                src/tune/levers.c
FUZZ_LIB_OBJS := $(patsubst src/%.c,$(FUZZ_BUILD)/obj/%.o,$(FUZZ_LIB_SRCS))
FUZZ_BINS    := $(patsubst %,$(FUZZ_BUILD)/fuzz_%,$(FUZZ_NAMES))
REPLAY_BINS  := $(patsubst %,$(BUILD)/tests/fuzz/replay_%,$(FUZZ_NAMES))
EXTRA_TARGETS += $(REPLAY_BINS)

.PHONY: fuzz fuzz-bin
# the objects are intermediates of the harness rule: kept, so that a second `make fuzz` links
# instead of compiling every fuzzed module again
.SECONDARY: $(FUZZ_LIB_OBJS)
fuzz: fuzz-bin
	FUZZ_SEED=$(FUZZ_SEED) bash tests/fuzz/fuzz.sh $(FUZZ_SECONDS) $(FUZZ_BUILD) $(FUZZ_ONLY)

fuzz-bin: $(FUZZ_BINS)

$(FUZZ_BUILD)/obj/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) $(MODULE_CFLAGS_$(firstword $(subst /, ,$*))) -MMD -MP -c $< -o $@

$(FUZZ_BUILD)/fuzz_%: tests/fuzz/fuzz_%.c tests/fuzz/fuzz.h $(FUZZ_LIB_OBJS)
	@mkdir -p $(dir $@)
	$(FUZZ_CC) $(FUZZ_CFLAGS) -fsanitize=fuzzer $< $(FUZZ_LIB_OBJS) $(LDLIBS) -o $@

$(BUILD)/tests/fuzz/replay_%: tests/fuzz/fuzz_%.c tests/fuzz/replay.c tests/fuzz/fuzz.h $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests/fuzz $< tests/fuzz/replay.c $(LIB) $(LDFLAGS) $(LDLIBS) -o $@

-include $(FUZZ_LIB_OBJS:.o=.d)
