# src/trace/module.mk: builds the LD_PRELOAD tracer $(BUILD)/libscaffold_trace.so with plain gcc
# (no MPI, no OpenMP: it is loaded into arbitrary programs), plus the small C workloads the trace
# tests and the overhead benchmark run under it. Linked only with -ldl -lpthread -lz.
TRACE_CC      ?= gcc
TRACE_SRCS    := $(wildcard src/trace/*.c)
TRACE_SO      := $(BUILD)/libscaffold_trace.so
TRACE_WARN    := -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes -Wvla -Wformat=2
TRACE_CFLAGS  := -std=c11 -D_GNU_SOURCE -O2 -g -fPIC -fvisibility=hidden $(TRACE_WARN) \
                 -Isrc -Iinclude
TRACE_LDFLAGS := -shared -Wl,--no-undefined -Wl,-z,relro -Wl,-z,now

$(TRACE_SO): $(TRACE_SRCS) src/trace/trace_int.h include/scaffold/trace.h src/trace/module.mk
	@mkdir -p $(dir $@)
	$(TRACE_CC) $(TRACE_CFLAGS) $(TRACE_LDFLAGS) $(TRACE_SRCS) -o $@ -ldl -lpthread -lz

# Test workloads (tests/trace/prog_*.c) and the overhead benchmark (bench/trace/ovh_*.c): plain
# gcc programs, so the trace shows only their own I/O (no MPI runtime start-up noise).
TRACE_PROGS := $(patsubst tests/trace/%.c,$(BUILD)/tests/trace/%,$(wildcard tests/trace/prog_*.c)) \
               $(patsubst bench/trace/%.c,$(BUILD)/bench/trace/%,$(wildcard bench/trace/ovh_*.c))

$(BUILD)/tests/trace/prog_%: tests/trace/prog_%.c src/tracehooks/tracehooks.c include/scaffold/trace.h
	@mkdir -p $(dir $@)
	$(TRACE_CC) -std=c11 -D_GNU_SOURCE -O2 -g $(TRACE_WARN) -Iinclude -pthread $< \
	    src/tracehooks/tracehooks.c -o $@

$(BUILD)/bench/trace/ovh_%: bench/trace/ovh_%.c
	@mkdir -p $(dir $@)
	$(TRACE_CC) -std=c11 -D_GNU_SOURCE -O2 -g $(TRACE_WARN) -pthread $< -o $@

EXTRA_TARGETS += $(TRACE_SO) $(TRACE_PROGS)
