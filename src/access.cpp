#include "access.hpp"

#include "lease_store.hpp"

namespace lease {

namespace {

// The prefix rules, cached per backend until lease.prefix_rules is
// invalidated: every statement that changes the table (lease.allow and
// lease.disallow, and plain INSERT, UPDATE, DELETE, TRUNCATE or COPY: the
// statement trigger prefix_rules_changed) invalidates it, so every backend
// reloads after the change commits. With no rules -- the usual case -- a
// grant pays nothing for them.
struct CachedRule {
    char* prefix;
    std::size_t length;
    Oid role;
};

struct RuleCache {
    bool valid;
    Oid relation;  // lease.prefix_rules, whose invalidation ends the cache
    int count;
    CachedRule* rules;
};

RuleCache rule_cache;

const RuleCache& prefix_rules()
{
    while (!rule_cache.valid) {
        const uint64 invalidations_before = SharedInvalidMessageCounter;
        int count;
        const PrefixRule* loaded = store_prefix_rules(&count);
        if (rule_cache.rules != nullptr) {
            for (int i = 0; i < rule_cache.count; ++i)
                pfree(rule_cache.rules[i].prefix);
            pfree(rule_cache.rules);
        }
        CachedRule* rules = static_cast<CachedRule*>(MemoryContextAlloc(CacheMemoryContext, sizeof(CachedRule) * (count + 1)));
        for (int i = 0; i < count; ++i) {
            rules[i].length = VARSIZE_ANY_EXHDR(loaded[i].prefix);
            rules[i].prefix = static_cast<char*>(MemoryContextAlloc(CacheMemoryContext, rules[i].length + 1));
            memcpy(rules[i].prefix, VARDATA_ANY(loaded[i].prefix), rules[i].length);
            rules[i].role = loaded[i].role;
        }
        rule_cache = RuleCache{invalidations_before == SharedInvalidMessageCounter, prefix_rules_relation(), count,
                               rules};
    }
    return rule_cache;
}

}  // namespace

void forget_prefix_rules(Oid relid)
{
    if (relid == InvalidOid || relid == rule_cache.relation)
        rule_cache.valid = false;
}

Datum prefix_rules_changed(FunctionCallInfo fcinfo)
{
    if (!CALLED_AS_TRIGGER(fcinfo))
        ereport(ERROR, (errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
                        errmsg("lease.prefix_rules_changed() may only be called as a trigger")));
    const TriggerData* trigger = reinterpret_cast<TriggerData*>(fcinfo->context);
    // Transactional: the message goes to every backend when this transaction
    // commits (and to this one at its next command), and to nobody if it
    // rolls back.
    CacheInvalidateRelcacheByRelid(RelationGetRelid(trigger->tg_relation));
    return PointerGetDatum(NULL);
}

bool caller_is_admin()
{
    return has_privs_of_role(GetUserId(), lease_tables_owner());
}

bool caller_acts_for(Oid role)
{
    const Oid caller = GetUserId();
    return !OidIsValid(role) || role == caller || has_privs_of_role(caller, role) || caller_is_admin();
}

namespace {

[[noreturn]] void report_foreign(Oid role, const char* object)
{
    const char* role_name = GetUserNameFromId(role, true);
    ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE), errmsg("permission denied for %s", object),
                    errdetail("It belongs to role \"%s\"; only its members and the extension's admins may renew, "
                              "release, close or take it over while it is live.",
                              role_name != nullptr ? role_name : "(dropped)")));
    pg_unreachable();
}

}  // namespace

void require_acting_for(Oid role, const char* what, const text* name)
{
    if (!caller_acts_for(role))
        report_foreign(role, psprintf("%s \"%s\"", what, text_to_cstring(name)));
}

void require_acting_for_session(Oid role, int64 session)
{
    if (!caller_acts_for(role))
        report_foreign(role, psprintf("session %lld", static_cast<long long>(session)));
}

namespace {

// The longest prefix with rules that name starts with, and whether the
// caller is a member of one of its roles.
struct PrefixVerdict {
    bool confined;
    bool allowed;
    std::size_t prefix_length;
};

PrefixVerdict judge(const text* name)
{
    PrefixVerdict verdict = {false, true, 0};
    if (!catalog_has_sessions())
        return verdict;
    const RuleCache& cache = prefix_rules();
    const char* bytes = VARDATA_ANY(name);
    const std::size_t length = VARSIZE_ANY_EXHDR(name);
    for (int i = 0; i < cache.count; ++i) {
        const CachedRule& rule = cache.rules[i];
        if (rule.length <= length && memcmp(rule.prefix, bytes, rule.length) == 0 &&
            (!verdict.confined || rule.length > verdict.prefix_length)) {
            verdict.prefix_length = rule.length;
            verdict.confined = true;
        }
    }
    if (!verdict.confined || caller_is_admin())
        return verdict;
    const Oid caller = GetUserId();
    verdict.allowed = false;
    for (int i = 0; i < cache.count && !verdict.allowed; ++i) {
        const CachedRule& rule = cache.rules[i];
        verdict.allowed = rule.length == verdict.prefix_length && memcmp(rule.prefix, bytes, rule.length) == 0 &&
                          has_privs_of_role(caller, rule.role);
    }
    return verdict;
}

}  // namespace

bool caller_may_acquire(const text* name)
{
    return judge(name).allowed;
}

void check_prefix_rules(const text* name)
{
    const PrefixVerdict verdict = judge(name);
    if (verdict.allowed)
        return;
    ereport(ERROR, (errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
                    errmsg("permission denied to acquire lease \"%s\"", text_to_cstring(name)),
                    errdetail("Names under the prefix \"%.*s\" are confined to the roles lease.allow names, and "
                              "role \"%s\" is not a member of any of them.",
                              static_cast<int>(verdict.prefix_length), VARDATA_ANY(name),
                              GetUserNameFromId(GetUserId(), false))));
}

}  // namespace lease
