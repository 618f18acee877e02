#include "lease_store.hpp"

#include "store_relations.hpp"

namespace lease {

void require_writable(const char* function)
{
    PreventCommandIfReadOnly(function);
    PreventCommandDuringRecovery(function);
}

void initialize_lease_store()
{
    define_force_sql_path();
    register_relation_cache_callback();
    register_token_epoch_callbacks();
}

}  // namespace lease
