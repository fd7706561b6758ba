"""Migrations that shipped before the migration check (starverse.core.migration_safety) and
break one of its rules, each with the reason it was accepted. Nothing is added here for a new
migration without a reason that this check cannot see; the usual answer is to split it."""

# Every one of these is in release 0.1.0, the first: no earlier release's code was serving while
# they ran, and the large tables they touch were empty or new on every installation.
FIRST_RELEASE = "release 0.1.0, the first: no earlier release served while it ran"
# The models moved from instances to fleet, storage and compute keep their tables: the state-only
# removal in instances is the other half of a CreateModel on the same table in the new app.
MOVED = "a model moved to another app on the same table: the column lives on there"

ALLOWED: dict[tuple[str, str, str], str] = {
    (
        "accounts",
        "0003_user_email_verification",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    ("accounts", "0004_teams", "adds a NOT NULL column without a database default"): FIRST_RELEASE,
    (
        "billing",
        "0005_operator_permissions_and_approvals",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "billing",
        "0006_disputes_arrears_and_holds",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    ("billing", "0006_disputes_arrears_and_holds", "blocks a large table"): FIRST_RELEASE,
    ("billing", "0010_transfer_invoiceable_portion", "blocks a large table"): FIRST_RELEASE,
    (
        "billing",
        "0012_ledger_seq",
        "makes a column NOT NULL without a database default",
    ): FIRST_RELEASE,
    ("billing", "0012_ledger_seq", "blocks a large table"): FIRST_RELEASE,
    (
        "billing",
        "0013_topup_paid_with_and_cancelled",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "instances",
        "0004_monthly_rental",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "instances",
        "0005_instance_ssh_keys",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "instances",
        "0006_event_params",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "instances",
        "0007_cloud_disks",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "instances",
        "0008_fleet_and_storage_moved_out",
        "keeps a NOT NULL column the new code no longer writes",
    ): MOVED,
    (
        "instances",
        "0010_offering_runtime_class",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "instances",
        "0012_instance_ssh_host_key",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "fleet",
        "0003_gpumodel_premium",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "instances",
        "0013_gateway_ports_and_shares",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "fleet",
        "0005_node_fabric",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "instances",
        "0014_cluster_ranks",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    ("fleet", "0007_regions", "adds a NOT NULL column without a database default"): FIRST_RELEASE,
    (
        "instances",
        "0018_image_size_and_prepull",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "instances",
        "0019_offering_trial_price_slug_and_chinese",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "clusters",
        "0002_rank_provisioning",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "instances",
        "0021_auto_stop",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "storage",
        "0002_disk_region",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "fleet",
        "0010_node_review",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "instances",
        "0023_catalog_moved_to_compute",
        "keeps a NOT NULL column the new code no longer writes",
    ): MOVED,
    ("compute", "0002_holdings", "blocks a large table"): FIRST_RELEASE,
    (
        "compute",
        "0002_holdings",
        "makes a column NOT NULL without a database default",
    ): FIRST_RELEASE,
    ("compute", "0002_holdings", "drops a column the previous release reads"): FIRST_RELEASE,
    (
        "instances",
        "0024_queue_fields_moved_to_holdings",
        "drops a column the previous release reads",
    ): FIRST_RELEASE,
    (
        "instances",
        "0024_queue_fields_moved_to_holdings",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "endpoints",
        "0004_replica_holding",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "compute",
        "0003_holding_parent",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "compute",
        "0004_holding_meter",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "instances",
        "0025_metering_moved_to_holdings",
        "drops a column the previous release reads",
    ): FIRST_RELEASE,
    (
        "datasets",
        "0003_description_zh_hans",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "datasets",
        "0005_names_zh_hans",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "endpoints",
        "0005_metering_moved_to_holdings",
        "drops a column the previous release reads",
    ): FIRST_RELEASE,
    (
        "fleet",
        "0012_region_display_name_zh_hans",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "instances",
        "0026_ranks_moved_to_clusters",
        "drops a column the previous release reads",
    ): FIRST_RELEASE,
    (
        "instances",
        "0029_moved_columns_removed",
        "drops a column the previous release reads",
    ): FIRST_RELEASE,
    (
        "instances",
        "0030_pod_watch_pod_uid",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
    (
        "instances",
        "0033_workload_log_shipping",
        "adds a NOT NULL column without a database default",
    ): FIRST_RELEASE,
}
