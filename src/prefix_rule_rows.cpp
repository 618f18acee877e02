#include "lease_store.hpp"
#include "store_spi.hpp"

namespace lease {

// prefix_rules
constexpr StoredQuery query_prefix_rules = {"SELECT prefix, role FROM lease.prefix_rules", 0, {}, Plan::scan};

PrefixRule* store_prefix_rules(int* count)
{
    const CallerIdentity caller = connect_as_lease_owner();
    // The latest rules, not the calling statement's snapshot: the cache may be
    // reloaded in the middle of a statement that began before a rule committed.
    run(query_prefix_rules, nullptr, nullptr, true, true);
    *count = static_cast<int>(SPI_processed);
    PrefixRule* rules = static_cast<PrefixRule*>(SPI_palloc(sizeof(PrefixRule) * (*count + 1)));
    for (int i = 0; i < *count; ++i) {
        bool isnull;
        rules[i].prefix = result_text(i, 1);
        rules[i].role = DatumGetObjectId(result_value(i, 2, &isnull));
    }
    finish_as_caller(caller);
    return rules;
}

// allow($1 role, $2 prefix)
constexpr StoredQuery query_allow = {
    "INSERT INTO lease.prefix_rules (prefix, role) VALUES ($2, $1) ON CONFLICT DO NOTHING",
    2,
    {REGROLEOID, TEXTOID}};

void store_allow(Oid role, const text* prefix)
{
    Datum values[2] = {ObjectIdGetDatum(role), PointerGetDatum(prefix)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_allow, values, nullptr, false);
    finish_as_caller(caller);
}

// disallow($1 role, $2 prefix)
constexpr StoredQuery query_disallow = {
    "DELETE FROM lease.prefix_rules"
    " WHERE prefix OPERATOR(pg_catalog.=) $2 AND role OPERATOR(pg_catalog.=) $1",
    2,
    {REGROLEOID, TEXTOID}};

bool store_disallow(Oid role, const text* prefix)
{
    Datum values[2] = {ObjectIdGetDatum(role), PointerGetDatum(prefix)};
    const CallerIdentity caller = connect_as_lease_owner();
    run(query_disallow, values, nullptr, false);
    const bool removed = SPI_processed > 0;
    finish_as_caller(caller);
    return removed;
}

}  // namespace lease
