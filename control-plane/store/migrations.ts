// Schema migrations, written as code (no CLI codegen at runtime) and applied
// on start. DDL is the portable subset SQLite and PostgreSQL both accept.
// WARNING: never edit an applied migration; add a new one.
import { Migration } from '@mikro-orm/migrations';

export class Migration0001Initial extends Migration {
  override up(): void {
    this.addSql(`create table "accounts" (
      "customer_id" varchar(64) primary key, "email" varchar(320) not null unique,
      "tier" varchar(32) not null, "jurisdiction" varchar(16) not null,
      "created_at" varchar(40) not null, "billing_cycle_start" varchar(40) not null,
      "capsules_used" integer not null default 0, "cdps_used" integer not null default 0,
      "live_capsules" integer not null default 0)`);
    this.addSql(`create table "api_keys" (
      "key_hash" varchar(128) primary key, "customer_id" varchar(64) not null references "accounts" ("customer_id"),
      "mode" varchar(8) not null, "created_at" varchar(40) not null, "revoked" integer not null default 0)`);
    this.addSql(`create table "capsules" (
      "id" varchar(64) primary key, "customer_id" varchar(64) not null references "accounts" ("customer_id"),
      "status" varchar(24) not null, "api_form" varchar(16) not null, "ttl_seconds" integer not null,
      "created_at" varchar(40) not null, "expires_at" varchar(40) not null,
      "data_classification" varchar(32) not null, "jurisdiction" varchar(16) not null,
      "capsulefile_id" varchar(64) null, "metadata" text not null,
      "execution_count" integer not null default 0, "bytes_processed" double precision not null default 0,
      "destroyed_at" varchar(40) null, "billable" integer not null, "activity_seq" integer not null default 0)`);
    this.addSql(`create index "capsules_customer_idx" on "capsules" ("customer_id", "created_at", "id")`);
    this.addSql(`create index "capsules_status_expiry_idx" on "capsules" ("status", "expires_at")`);
    this.addSql(`create table "activity_events" (
      "capsule_id" varchar(64) not null references "capsules" ("id"), "seq" integer not null,
      "type" varchar(64) not null, "at" varchar(40) not null, "fields" text not null,
      primary key ("capsule_id", "seq"))`);
    this.addSql(`create table "proofs" (
      "proof_id" varchar(64) primary key, "capsule_id" varchar(64) not null unique references "capsules" ("id"),
      "customer_id" varchar(64) not null, "record" text not null, "response" text null,
      "partial" integer not null, "created_at" varchar(40) not null)`);
    this.addSql(`create table "signing_keys" (
      "key_id" varchar(128) primary key, "public_key" varchar(128) not null, "created_at" varchar(40) not null,
      "signing_authority_id" varchar(128) not null, "signing_key_version" integer not null)`);
    this.addSql(`create table "idempotency_keys" (
      "customer_id" varchar(64) not null, "idem_key" varchar(255) not null, "request_hash" varchar(128) not null,
      "state" varchar(16) not null, "status" integer null, "body" text null, "headers" text null,
      "created_at" varchar(40) not null, primary key ("customer_id", "idem_key"))`);
    this.addSql(`create table "contact_messages" (
      "id" varchar(64) primary key, "email" varchar(320) not null, "name" varchar(200) null,
      "company" varchar(200) null, "message" text not null, "source" varchar(200) null, "created_at" varchar(40) not null)`);
  }
}

export class Migration0002Capsulefiles extends Migration {
  override up(): void {
    this.addSql(`create table "capsulefiles" (
      "id" varchar(64) primary key, "owner" varchar(64) not null, "name" varchar(128) not null,
      "status" varchar(16) not null, "definition" text not null, "content_hash" varchar(136) null,
      "size_bytes" double precision null, "file_count" integer null, "finalized_at" varchar(40) null,
      "created_at" varchar(40) not null, constraint "capsulefiles_owner_name_uq" unique ("owner", "name"))`);
    this.addSql(`create index "capsulefiles_owner_idx" on "capsulefiles" ("owner", "created_at", "id")`);
    this.addSql(`create table "capsulefile_files" (
      "capsulefile_id" varchar(64) not null references "capsulefiles" ("id") on delete cascade,
      "filename" varchar(255) not null, "size_bytes" integer not null, "sha512" varchar(136) not null,
      "content_b64" text not null, primary key ("capsulefile_id", "filename"))`);
    // A pinned capsule keeps the content hash itself: proofs stay right after the Capsulefile is deleted.
    this.addSql(`alter table "capsules" add column "capsulefile_content_hash" varchar(136) null`);
    this.addSql(`create index "capsules_capsulefile_idx" on "capsules" ("capsulefile_id", "status")`);
  }
}

export class Migration0003EgressProfiles extends Migration {
  override up(): void {
    // Profile names are unique per account: the default profile of the flat /v1/egress endpoints is the one named "default".
    this.addSql(`create table "egress_profiles" (
      "id" varchar(64) primary key, "customer_id" varchar(64) not null references "accounts" ("customer_id"),
      "name" varchar(128) not null, "description" text not null, "created_at" varchar(40) not null,
      constraint "egress_profiles_customer_name_uq" unique ("customer_id", "name"))`);
    this.addSql(`create index "egress_profiles_customer_idx" on "egress_profiles" ("customer_id", "created_at", "id")`);
    // The same (kind, value, port) twice in one profile is a conflict, not a second rule.
    this.addSql(`create table "egress_rules" (
      "id" varchar(64) primary key, "profile_id" varchar(64) not null references "egress_profiles" ("id") on delete cascade,
      "customer_id" varchar(64) not null, "kind" varchar(16) not null, "value" varchar(300) not null,
      "port" integer not null, "created_at" varchar(40) not null,
      constraint "egress_rules_profile_rule_uq" unique ("profile_id", "kind", "value", "port"))`);
    this.addSql(`create index "egress_rules_customer_idx" on "egress_rules" ("customer_id", "created_at", "id")`);
    this.addSql(`create index "egress_rules_profile_idx" on "egress_rules" ("profile_id", "created_at", "id")`);
    // No foreign key: a destroyed capsule keeps naming a profile that may be deleted later.
    this.addSql(`alter table "capsules" add column "egress_profile_id" varchar(64) null`);
    this.addSql(`create index "capsules_egress_profile_idx" on "capsules" ("egress_profile_id", "status")`);
  }
}

export class Migration0011Accounts extends Migration {
  override up(): void {
    // API keys gain an id, a display prefix, use and revocation times, and the
    // key's MFA verification. Keys issued before this migration get an id from
    // their hash and a prefix of their mode only (the key itself was never stored).
    this.addSql(`alter table "api_keys" add column "id" varchar(64) null`);
    this.addSql(`alter table "api_keys" add column "prefix" varchar(16) null`);
    this.addSql(`alter table "api_keys" add column "last_used_at" varchar(40) null`);
    // When the key stops working; a future value is a rotation grace still running.
    this.addSql(`alter table "api_keys" add column "revoked_at" varchar(40) null`);
    this.addSql(`alter table "api_keys" add column "mfa_verified_until" varchar(40) null`);
    this.addSql(`update "api_keys" set "id" = 'key_' || substr("key_hash", 1, 24), "prefix" = 'svc_' || "mode" || '_'`);
    this.addSql(`update "api_keys" set "revoked_at" = "created_at" where "revoked" = 1`);
    this.addSql(`create unique index "api_keys_id_uq" on "api_keys" ("id")`);
    this.addSql(`create index "api_keys_customer_idx" on "api_keys" ("customer_id", "created_at", "id")`);
    // The TOTP factor (secret sealed at rest), its wrong-code budget and replay guard.
    this.addSql(`create table "mfa_factors" (
      "customer_id" varchar(64) primary key references "accounts" ("customer_id"),
      "secret_sealed" text not null, "state" varchar(16) not null, "created_at" varchar(40) not null,
      "activated_at" varchar(40) null, "last_step" bigint null,
      "attempts" integer not null default 0, "attempts_window_start" varchar(40) null)`);
    this.addSql(`create table "mfa_recovery_codes" (
      "customer_id" varchar(64) not null references "accounts" ("customer_id"), "code_hash" varchar(64) not null,
      "used_at" varchar(40) null, primary key ("customer_id", "code_hash"))`);
    // One row per billable event, written in the transaction of the event itself.
    this.addSql(`create table "usage_items" (
      "id" varchar(64) primary key, "customer_id" varchar(64) not null, "kind" varchar(24) not null,
      "capsule_id" varchar(64) not null, "quantity" bigint not null, "billable" integer not null,
      "created_at" varchar(40) not null)`);
    this.addSql(`create index "usage_items_customer_idx" on "usage_items" ("customer_id", "created_at", "id")`);
    // Payment processor state: processed event ids (replays are ignored) and each account's subscription.
    this.addSql(`create table "billing_events" (
      "event_id" varchar(255) primary key, "type" varchar(128) not null, "received_at" varchar(40) not null)`);
    this.addSql(`create table "billing_subscriptions" (
      "customer_id" varchar(64) primary key references "accounts" ("customer_id"),
      "processor_customer" varchar(255) null, "subscription" varchar(255) null, "tier" varchar(32) not null,
      "updated_at" varchar(40) not null)`);
    this.addSql(`create index "billing_subscriptions_sub_idx" on "billing_subscriptions" ("subscription")`);
  }
}

export class Migration0005ActivityCap extends Migration {
  override up(): void {
    // Events refused once a capsule's trail reached its cap: how many, and the first one's type.
    this.addSql(`alter table "capsules" add column "activity_dropped" integer not null default 0`);
    this.addSql(`alter table "capsules" add column "activity_first_dropped" varchar(64) null`);
  }
}

export class Migration0010Webhooks extends Migration {
  override up(): void {
    // Endpoints: the signing secret only sealed (envelope encryption under the master key).
    this.addSql(`create table "webhook_endpoints" (
      "id" varchar(64) primary key, "customer_id" varchar(64) not null references "accounts" ("customer_id"),
      "url" varchar(2048) not null, "events" text not null, "description" text not null,
      "active" integer not null default 1, "secret_sealed" text not null,
      "created_at" varchar(40) not null, "updated_at" varchar(40) not null)`);
    this.addSql(
      `create index "webhook_endpoints_customer_idx" on "webhook_endpoints" ("customer_id", "created_at", "id")`,
    );
    // The outbox: one row per event that had a subscriber, written in the state change's transaction.
    this.addSql(`create table "webhook_events" (
      "id" varchar(64) primary key, "customer_id" varchar(64) not null, "type" varchar(64) not null,
      "payload" text not null, "created_at" varchar(40) not null)`);
    this.addSql(`create index "webhook_events_created_idx" on "webhook_events" ("created_at")`);
    // One row per attempt; a pending row is claimed under a lease (lease_owner, lease_until).
    this.addSql(`create table "webhook_deliveries" (
      "id" varchar(64) primary key, "endpoint_id" varchar(64) not null, "customer_id" varchar(64) not null,
      "event_id" varchar(64) not null, "event_type" varchar(64) not null, "attempt_number" integer not null,
      "status" varchar(16) not null, "due_at" varchar(40) not null, "response_status" integer null,
      "response_body" text null, "duration_ms" integer null, "error" varchar(300) null,
      "next_attempt_at" varchar(40) null, "attempted_at" varchar(40) null, "created_at" varchar(40) not null,
      "lease_owner" varchar(64) null, "lease_until" varchar(40) null,
      "replay" integer not null default 0, "replayed_at" varchar(40) null)`);
    this.addSql(`create index "webhook_deliveries_due_idx" on "webhook_deliveries" ("status", "due_at")`);
    this.addSql(
      `create index "webhook_deliveries_endpoint_idx" on "webhook_deliveries" ("endpoint_id", "created_at", "id")`,
    );
    this.addSql(
      `create index "webhook_deliveries_customer_idx" on "webhook_deliveries" ("customer_id", "status", "created_at", "id")`,
    );
  }
}

export class Migration0013Replicas extends Migration {
  override up(): void {
    // Leases of background jobs one control plane at a time runs (the TTL sweeper).
    this.addSql(`create table "leases" (
      "name" varchar(64) primary key, "owner" varchar(64) not null, "until" varchar(40) not null)`);
  }
}

export class Migration0014PendingProofs extends Migration {
  override up(): void {
    // Two-phase signing: a wiped capsule's unsigned proof input, kept until the managed key signs it.
    this.addSql(`create table "pending_proofs" (
      "capsule_id" varchar(64) primary key, "customer_id" varchar(64) not null,
      "proof_id" varchar(64) not null unique, "partial" integer not null, "billable" integer not null,
      "input" text not null, "response" text null, "created_at" varchar(40) not null,
      "signed_at" varchar(40) null)`);
    this.addSql(`create index "pending_proofs_unsigned_idx" on "pending_proofs" ("signed_at", "created_at")`);
  }
}

export class Migration0016RateWindows extends Migration {
  override up(): void {
    // Per-customer request counts per one-minute window, shared by the control planes of one database.
    this.addSql(`create table "rate_windows" (
      "key" varchar(96) not null, "window_start" bigint not null, "count" integer not null,
      primary key ("key", "window_start"))`);
  }
}

export class Migration0017RunnerNodes extends Migration {
  override up(): void {
    // Several runners: the registry the control planes keep from their heartbeats, and where each capsule runs.
    this.addSql(`create table "runner_nodes" (
      "node_id" varchar(128) primary key, "address" varchar(300) not null, "labels" text not null,
      "capacity" text null, "heartbeat_at" bigint not null, "draining" integer not null default 0,
      "lost_at" bigint null)`);
    this.addSql(`create table "capsule_placements" (
      "capsule_id" varchar(64) primary key, "node_id" varchar(128) not null, "memory_mb" integer not null,
      "placed_at" bigint not null)`);
    this.addSql(`create index "capsule_placements_node_idx" on "capsule_placements" ("node_id")`);
  }
}

export class Migration0018IdempotencyTakeover extends Migration {
  override up(): void {
    // A pending Idempotency-Key is renewed while its request runs; one not renewed (its process died) is taken over.
    // resource_id: the capsule its request created, written with the capsule (a retry answers with it).
    this.addSql(`alter table "idempotency_keys" add column "renewed_at" varchar(40) null`);
    this.addSql(`alter table "idempotency_keys" add column "resource_id" varchar(64) null`);
  }
}

export const MIGRATIONS = [
  { name: 'Migration0001Initial', class: Migration0001Initial },
  { name: 'Migration0002Capsulefiles', class: Migration0002Capsulefiles },
  { name: 'Migration0003EgressProfiles', class: Migration0003EgressProfiles },
  { name: 'Migration0005ActivityCap', class: Migration0005ActivityCap },
  { name: 'Migration0010Webhooks', class: Migration0010Webhooks },
  { name: 'Migration0011Accounts', class: Migration0011Accounts },
  { name: 'Migration0013Replicas', class: Migration0013Replicas },
  { name: 'Migration0014PendingProofs', class: Migration0014PendingProofs },
  { name: 'Migration0016RateWindows', class: Migration0016RateWindows },
  { name: 'Migration0017RunnerNodes', class: Migration0017RunnerNodes },
  { name: 'Migration0018IdempotencyTakeover', class: Migration0018IdempotencyTakeover },
];
