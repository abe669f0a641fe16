# src/train: cairo's headers live in their own include directory.
MODULE_CFLAGS_train := $(shell pkg-config --cflags cairo 2>/dev/null || echo -I/usr/include/cairo)
