# PGXS build for the lease extension (C++17).

EXTENSION = lease
MODULE_big = lease
OBJS = src/entry_points.o src/arguments.o src/fence.o src/lease_store.o src/name_template.o src/validation.o
DATA = $(wildcard sql/lease--*.sql)

# pg_regress inputs are sql/*.sql except the extension scripts (sql/lease--*.sql).
REGRESS = $(sort $(filter-out lease--%,$(basename $(notdir $(wildcard sql/*.sql)))))
REGRESS_OPTS = --inputdir=.
ISOLATION = $(sort $(basename $(notdir $(wildcard specs/*.spec))))
ISOLATION_OPTS = --inputdir=.

PG_CONFIG ?= pg_config
PG_CXXFLAGS = -std=c++17 -Wall -Wextra -Werror
# PostgreSQL's headers are not ours to keep -Wextra clean: include them as system headers.
PG_CPPFLAGS = -isystem $(shell $(PG_CONFIG) --includedir-server)
SHLIB_LINK += -lstdc++

EXTRA_CLEAN = results regression.diffs regression.out output_iso test/unit/core_test

# The LLVM bitcode rule for .cpp drops CXXFLAGS (so C++17 fails to compile) and
# JIT inlining of a few SPI-bound entry points buys nothing: build no bitcode.
override with_llvm = no

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# Unit tests of the pure C++ core (GoogleTest); no server needed.
UNIT_TEST = test/unit/core_test
$(UNIT_TEST): test/unit/core_test.cpp src/validation.cpp src/name_template.cpp src/core.hpp
	$(CXX) -std=c++17 -Wall -Wextra -Werror -Isrc -o $@ $(filter %.cpp,$^) -lgtest -lgtest_main -pthread

unittest: $(UNIT_TEST)
	./$(UNIT_TEST)
.PHONY: unittest
