# PGXS build for the lease extension (C++17).

EXTENSION = lease
MODULE_big = lease
OBJS = src/entry_points.o src/access.o src/arguments.o src/events.o src/fence.o src/grants.o src/idempotency.o \
	src/name_template.o src/pools.o src/sessions.o src/validation.o src/waiting.o \
	src/lease_store.o src/lock_tags.o src/store_spi.o src/store_relations.o src/token_epochs.o \
	src/primary_key_scan.o src/row_writer.o src/lease_rows.o src/session_rows.o src/history_rows.o \
	src/prefix_rule_rows.o src/pool_rows.o src/idempotency_key_rows.o src/holder_rows.o src/holders.o \
	src/waiter_registry.o src/shared_memory.o src/metrics.o
DATA = $(wildcard sql/lease--*.sql)

# pg_regress inputs are sql/*.sql except the extension scripts (sql/lease--*.sql).
REGRESS = $(sort $(filter-out lease--%,$(basename $(notdir $(wildcard sql/*.sql)))))
REGRESS_OPTS = --inputdir=.
ISOLATION = $(sort $(basename $(notdir $(wildcard specs/*.spec))))
ISOLATION_OPTS = --inputdir=.

PG_CONFIG ?= pg_config
# Warnings are errors in our own test and CI builds (scripts/test exports
# WERROR=-Werror), not in a user's build with another compiler.
WERROR ?=
PG_CXXFLAGS = -std=c++17 -Wall -Wextra $(WERROR)
# No C++ exception may unwind into PostgreSQL, and the module throws none: the
# compiler enforces it (src/boundary.hpp), whatever flags a build passes
# (test/sanitize sets PG_CXXFLAGS of its own).
override PG_CXXFLAGS += -fno-exceptions
# PostgreSQL's headers are not ours to keep -Wextra clean: include them as system headers.
PG_CPPFLAGS = -isystem $(shell $(PG_CONFIG) --includedir-server)
SHLIB_LINK += -lstdc++

EXTRA_CLEAN = results regression.diffs regression.out output_iso test/unit/core_test

# The LLVM bitcode rule for .cpp drops CXXFLAGS (so C++17 fails to compile) and
# JIT inlining of a few SPI-bound entry points buys nothing: build no bitcode.
override with_llvm = no

PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# pg_lease, the command-line tool (docs/cli.md). It is a libpq client, not part
# of the server module, so it has its own rules instead of PGXS's PROGRAM (which
# would take over OBJS).
PG_LEASE = pg_lease
PG_LEASE_OBJS = $(patsubst %.cpp,%.o,$(wildcard cli/*.cpp))
PG_LEASE_VERSION = $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" lease.control)
PG_LEASE_CXXFLAGS = -std=c++17 -O2 -g -Wall -Wextra $(WERROR) -MMD -MP \
	-isystem $(libpq_srcdir) -DPG_LEASE_VERSION='"$(PG_LEASE_VERSION)"'
EXTRA_CLEAN += $(PG_LEASE) cli/*.o cli/*.d test/unit/cli_test

all: $(PG_LEASE)

cli/%.o: cli/%.cpp
	$(CXX) $(PG_LEASE_CXXFLAGS) -c -o $@ $<

$(PG_LEASE): $(PG_LEASE_OBJS)
	$(CXX) $(LDFLAGS) -o $@ $^ $(libpq)

-include $(PG_LEASE_OBJS:.o=.d)

install: install-pg_lease
install-pg_lease: $(PG_LEASE)
	$(MKDIR_P) '$(DESTDIR)$(bindir)'
	$(INSTALL_PROGRAM) $(PG_LEASE) '$(DESTDIR)$(bindir)/$(PG_LEASE)'

uninstall: uninstall-pg_lease
uninstall-pg_lease:
	rm -f '$(DESTDIR)$(bindir)/$(PG_LEASE)'
.PHONY: install-pg_lease uninstall-pg_lease

# Unit tests of pg_lease's pure logic (GoogleTest).
CLI_UNIT_TEST = test/unit/cli_test
CLI_UNIT_SOURCES = cli/command_line.cpp cli/duration.cpp cli/exit_codes.cpp cli/json.cpp \
	cli/idempotent_run.cpp cli/lease_event.cpp cli/lease_history.cpp cli/lease_leader.cpp cli/lease_status.cpp \
	cli/lease_waiters.cpp cli/output_capture.cpp cli/pg_array.cpp cli/text_table.cpp
$(CLI_UNIT_TEST): test/unit/cli_test.cpp $(CLI_UNIT_SOURCES) $(wildcard cli/*.hpp)
	$(CXX) -std=c++17 -Wall -Wextra $(WERROR) -Icli -o $@ $(filter %.cpp,$^) -lgtest -lgtest_main -pthread

# libpq clients the test suites and benchmarks build and run: the chaos
# harness, the fuzzer (also under test/sanitize/run.sh), the fleet workers,
# the high-availability test's client, the handover benchmark (bench/waits)
# and the direct-against-SQL differential test.
TEST_PROGRAMS = test/chaos/chaos test/fuzz/fuzz test/fleet/fleet test/ha/ha_client bench/handover \
	test/differential/differential
TEST_PROGRAM_CXXFLAGS = -std=c++17 -O2 -Wall -Wextra $(WERROR) -isystem $(libpq_srcdir)
EXTRA_CLEAN += $(TEST_PROGRAMS)
$(TEST_PROGRAMS): %: %.cpp test/common/pq.hpp test/common/history_log.hpp
	$(CXX) $(TEST_PROGRAM_CXXFLAGS) $(LDFLAGS) -o $@ $< $(libpq) -pthread
test-programs: $(TEST_PROGRAMS)
.PHONY: test-programs

# Unit tests of the pure C++ core (GoogleTest); no server needed.
UNIT_TEST = test/unit/core_test
$(UNIT_TEST): test/unit/core_test.cpp src/validation.cpp src/name_template.cpp src/core.hpp
	$(CXX) -std=c++17 -Wall -Wextra $(WERROR) -Isrc -o $@ $(filter %.cpp,$^) -lgtest -lgtest_main -pthread

unittest: $(UNIT_TEST) $(CLI_UNIT_TEST)
	./$(UNIT_TEST)
	./$(CLI_UNIT_TEST)
.PHONY: unittest

# The release archive for PGXN: lease-VERSION.zip of the commit checked out
# (uncommitted changes are not in it), VERSION being the release version in
# that commit's META.json, the one source of it (test/packages/run.sh checks
# that lease.control's default_version and debian/changelog agree).
DIST_VERSION = $(shell git show HEAD:META.json | sed -n 's/^   "version": "\(.*\)",$$/\1/p')
dist:
	git archive --format zip --prefix=lease-$(DIST_VERSION)/ -o lease-$(DIST_VERSION).zip HEAD
.PHONY: dist
EXTRA_CLEAN += lease-*.zip
