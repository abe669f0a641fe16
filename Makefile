# scaffold build: one library (build/libscaffold.a) from every src/<module>/*.c except the
# tracer and the CLI, the `scaffold` executable from src/cli/, C tests from tests/<area>/test_*.c.
# Module-specific rules (the LD_PRELOAD tracer, extra flags) live in src/<module>/module.mk.
#
# Knobs: SAN=address,undefined | SAN=thread (separate build dir), DEBUG=1, NATIVE=1, OMP=0,
# CUDA=1 (the CUDA backend, in build-cuda; see src/nn/cuda/module.mk),
# MPI=mpich (Debian's MPICH beside the default Open MPI: mpicc.mpich, mpirun.mpich, build-mpich/).
# The default build is portable (no -march=native): a binary built on one node runs on any CPU of
# the architecture, and src/nn picks its SIMD kernels at run time (src/nn/gemm.h). NATIVE=1
# compiles everything for the build machine instead.

CC       ?= mpicc
MPICC    ?= mpicc
PYTHON   ?= /usr/bin/python3
BUILD    ?= build
NATIVE   ?= 0
OMP      ?= 1

ifeq ($(origin CC),default)
CC := mpicc
endif
MPI      ?= openmpi
ifeq ($(MPI),mpich)
CC       := mpicc.mpich
MPICC    := mpicc.mpich
BUILD    := build-mpich
# The test scripts launch with $$MPIRUN (tests/lib.sh picks mpirun.mpich for SCAFFOLD_MPI=mpich).
export SCAFFOLD_MPI := mpich
endif

WARN     := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla -Wformat=2 \
            -Wno-format-truncation
CFLAGS   ?= -O2 -g
CFLAGS   += -std=c11 -D_GNU_SOURCE $(WARN) -Isrc -Iinclude -MMD -MP
LDLIBS   += -lyaml -lz -lpng -lcairo -lm -lpthread

comma := ,

ifeq ($(NATIVE),1)
CFLAGS   += -march=native
endif
ifeq ($(OMP),1)
CFLAGS   += -fopenmp
# The OpenMP runtime is linked statically when the compiler ships it (libgomp.a), so that
# scaffold's constructor (src/cli/main.c) sets the runtime's wait policy before the runtime reads
# its environment: a shared libgomp reads it in its own constructor, before any of the
# executable's. Without libgomp.a, the shared runtime and its default policy.
OMP_STATIC := $(shell p=$$($(CC) -print-file-name=libgomp.a 2>/dev/null); [ -f "$$p" ] && echo "$$p")
ifneq ($(OMP_STATIC),)
CFLAGS   += -DSCAFFOLD_OMP_STATIC
LDLIBS   += $(OMP_STATIC)
else
LDFLAGS  += -fopenmp
endif
endif
ifdef DEBUG
CFLAGS   += -O0 -fno-omit-frame-pointer
endif
ifdef SAN
BUILD    := $(BUILD)-$(subst $(comma),-,$(SAN))
CFLAGS   += -fsanitize=$(SAN) -fno-omit-frame-pointer -fno-sanitize-recover=undefined
LDFLAGS  += -fsanitize=$(SAN)
endif
# The optional CUDA backend (make CUDA=1): before the object lists, as it picks the build folder.
include src/nn/cuda/module.mk
LIB_MODULES := $(filter-out src/cli src/trace,$(patsubst %/,%,$(sort $(dir $(wildcard src/*/*.c)))))
LIB_SRCS    := $(foreach m,$(LIB_MODULES),$(wildcard $(m)/*.c))
LIB_OBJS    := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(LIB_SRCS))
CLI_SRCS    := $(wildcard src/cli/*.c)
CLI_OBJS    := $(patsubst src/%.c,$(BUILD)/obj/%.o,$(CLI_SRCS))
LIB         := $(BUILD)/libscaffold.a
BIN         := $(BUILD)/scaffold

TEST_SRCS   := $(wildcard tests/*/test_*.c)
TEST_BINS   := $(patsubst tests/%.c,$(BUILD)/tests/%,$(TEST_SRCS))
BENCH_SRCS  := $(wildcard bench/*/bench_*.c)
BENCH_BINS  := $(patsubst bench/%.c,$(BUILD)/bench/%,$(BENCH_SRCS))

# Extra artifacts that modules add (e.g. the tracer's shared library).
EXTRA_TARGETS :=

.PHONY: all test test-asan test-tsan bench run clean tests-bin benches-bin
all: $(BIN) $(TEST_BINS) $(BENCH_BINS) extra

-include src/*/module.mk
-include tests/fuzz/fuzz.mk
-include bench/gpu/kernels/kernels.mk

extra: $(EXTRA_TARGETS)

$(BUILD)/obj/%.o: src/%.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(MODULE_CFLAGS_$(firstword $(subst /, ,$*))) -c $< -o $@

$(LIB): $(LIB_OBJS)
	@mkdir -p $(dir $@)
	rm -f $@
	ar rcs $@ $^

$(BIN): $(CLI_OBJS) $(LIB)
	$(CC) $(LDFLAGS) $(CLI_OBJS) $(LIB) $(LDLIBS) -o $@

$(BUILD)/tests/%: tests/%.c $(LIB) tests/test.h
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) -Itests $< $(LIB) $(LDFLAGS) $(LDLIBS) -o $@

$(BUILD)/bench/%: bench/%.c $(LIB)
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $< $(LIB) $(LDFLAGS) $(LDLIBS) -o $@

tests-bin: $(BIN) $(TEST_BINS) extra
benches-bin: $(BIN) $(BENCH_BINS) extra

# The test suite: every tests/<area>/run.sh, summed by tests/run.sh into "N passed, N failed".
test: tests-bin
	BUILD=$(BUILD) PYTHON=$(PYTHON) bash tests/run.sh

# Sanitizer builds of the C unit tests (the areas' run.sh decide which binaries are cheap enough).
test-asan:
	$(MAKE) SAN=address,undefined tests-bin
	BUILD=build-address-undefined PYTHON=$(PYTHON) SCAFFOLD_TEST_SAN=1 bash tests/run.sh

test-tsan:
	$(MAKE) SAN=thread tests-bin
	BUILD=build-thread PYTHON=$(PYTHON) SCAFFOLD_TEST_SAN=1 bash tests/run.sh

bench: benches-bin
	BUILD=$(BUILD) PYTHON=$(PYTHON) bash bench/run.sh

run: $(BIN)
	bash tools/run_quickstart.sh

clean:
	rm -rf build build-*

-include $(LIB_OBJS:.o=.d) $(CLI_OBJS:.o=.d)
