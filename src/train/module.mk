# src/train: cairo's headers live in their own include directory.
MODULE_CFLAGS_train := $(shell pkg-config --cflags cairo 2>/dev/null || echo -I/usr/include/cairo)

# The git commit the binary is built from (the profile's scaffold_version): a header rewritten
# only when the description changes, so a new commit recompiles profile.c alone. "unknown"
# outside a git checkout.
SCAFFOLD_GIT := $(shell git describe --always --dirty --abbrev=12 2>/dev/null || echo unknown)
MODULE_CFLAGS_train += -I$(BUILD)/gen
$(BUILD)/gen/git_version.h: FORCE
	@mkdir -p $(dir $@)
	@echo '#define SCAFFOLD_GIT "$(SCAFFOLD_GIT)"' > $@.tmp
	@if cmp -s $@.tmp $@; then rm -f $@.tmp; else mv $@.tmp $@; fi
$(BUILD)/obj/train/profile.o: $(BUILD)/gen/git_version.h
.PHONY: FORCE
FORCE:
