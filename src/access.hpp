// Who may do what to a lease (docs/reference.md, "Privileges"): a grant
// belongs to the role that took it, and prefix rules confine names to roles.
#pragma once

#include "postgres_headers.hpp"

namespace lease {

// The extension's admins: superusers and members of the role that owns its tables.
bool caller_is_admin();

// Whether the caller may act for a grant or session recorded with this role:
// a member of it (with its privileges, as for table privileges) or an admin.
// InvalidOid (a grant recorded before 1.2) is anyone's.
bool caller_acts_for(Oid role);

// 42501 unless caller_acts_for(role).
void require_acting_for(Oid role, const char* what, const text* name);
void require_acting_for_session(Oid role, int64 session);

// 42501 unless the caller may acquire this name under the prefix rules: the
// longest prefix with rules that the name starts with decides, and the caller
// must be a member of one of its roles; names under no rule are free for all.
void check_prefix_rules(const text* name);

// The same rule as a question: whether the caller may acquire this name.
bool caller_may_acquire(const text* name);

// Forgets the cached prefix rules when relid is lease.prefix_rules (or
// InvalidOid: every relation): a relcache invalidation callback's work, for
// the one callback that dispatches them.
void forget_prefix_rules(Oid relid);

// lease.prefix_rules_changed(): the statement trigger on lease.prefix_rules
// (AFTER INSERT, UPDATE, DELETE or TRUNCATE, enabled ALWAYS so that
// replication apply fires it too) that sends a relcache invalidation of the
// table at commit, so that every backend reloads the rules
// (docs/operations.md, "Prefix rules written without lease.allow").
Datum prefix_rules_changed(FunctionCallInfo fcinfo);

}  // namespace lease
