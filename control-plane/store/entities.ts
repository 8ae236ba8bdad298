// Table mappings (EntitySchema: no decorators, no reflect-metadata). Columns
// hold plain scalars; JSON members are text serialized by the store, so that
// SQLite and PostgreSQL read back byte-identical documents.
import { EntitySchema } from '@mikro-orm/core';

export interface AccountRow {
  customer_id: string;
  email: string;
  tier: string;
  jurisdiction: string;
  created_at: string;
  billing_cycle_start: string;
  capsules_used: number;
  cdps_used: number;
  live_capsules: number;
}
export const AccountEntity = new EntitySchema<AccountRow>({
  name: 'AccountRow',
  tableName: 'accounts',
  properties: {
    customer_id: { type: 'string', primary: true },
    email: { type: 'string', unique: true },
    tier: { type: 'string' },
    jurisdiction: { type: 'string' },
    created_at: { type: 'string' },
    billing_cycle_start: { type: 'string' },
    capsules_used: { type: 'integer' },
    cdps_used: { type: 'integer' },
    live_capsules: { type: 'integer' },
  },
});

export interface ApiKeyRow {
  key_hash: string;
  customer_id: string;
  mode: string;
  created_at: string;
  revoked: number;
  id: string;
  prefix: string;
  last_used_at: string | null;
  revoked_at: string | null;
  mfa_verified_until: string | null;
}
export const ApiKeyEntity = new EntitySchema<ApiKeyRow>({
  name: 'ApiKeyRow',
  tableName: 'api_keys',
  properties: {
    key_hash: { type: 'string', primary: true },
    customer_id: { type: 'string' },
    mode: { type: 'string' },
    created_at: { type: 'string' },
    revoked: { type: 'integer' },
    id: { type: 'string', unique: true },
    prefix: { type: 'string' },
    last_used_at: { type: 'string', nullable: true },
    revoked_at: { type: 'string', nullable: true },
    mfa_verified_until: { type: 'string', nullable: true },
  },
});

export interface CapsuleRow {
  id: string;
  customer_id: string;
  status: string;
  api_form: string;
  ttl_seconds: number;
  created_at: string;
  expires_at: string;
  data_classification: string;
  jurisdiction: string;
  capsulefile_id: string | null;
  metadata: string;
  execution_count: number;
  bytes_processed: number;
  destroyed_at: string | null;
  billable: number;
  activity_seq: number;
  capsulefile_content_hash: string | null;
  egress_profile_id: string | null;
}
export const CapsuleEntity = new EntitySchema<CapsuleRow>({
  name: 'CapsuleRow',
  tableName: 'capsules',
  properties: {
    id: { type: 'string', primary: true },
    customer_id: { type: 'string' },
    status: { type: 'string' },
    api_form: { type: 'string' },
    ttl_seconds: { type: 'integer' },
    created_at: { type: 'string' },
    expires_at: { type: 'string' },
    data_classification: { type: 'string' },
    jurisdiction: { type: 'string' },
    capsulefile_id: { type: 'string', nullable: true },
    metadata: { type: 'text' },
    execution_count: { type: 'integer' },
    bytes_processed: { type: 'double' },
    destroyed_at: { type: 'string', nullable: true },
    billable: { type: 'integer' },
    activity_seq: { type: 'integer' },
    capsulefile_content_hash: { type: 'string', nullable: true },
    egress_profile_id: { type: 'string', nullable: true },
  },
});

export interface ActivityRow {
  capsule_id: string;
  seq: number;
  type: string;
  at: string;
  fields: string;
}
export const ActivityEntity = new EntitySchema<ActivityRow>({
  name: 'ActivityRow',
  tableName: 'activity_events',
  properties: {
    capsule_id: { type: 'string', primary: true },
    seq: { type: 'integer', primary: true },
    type: { type: 'string' },
    at: { type: 'string' },
    fields: { type: 'text' },
  },
});

export interface ProofRow {
  proof_id: string;
  capsule_id: string;
  customer_id: string;
  record: string;
  response: string | null;
  partial: number;
  created_at: string;
}
export const ProofEntity = new EntitySchema<ProofRow>({
  name: 'ProofRow',
  tableName: 'proofs',
  properties: {
    proof_id: { type: 'string', primary: true },
    capsule_id: { type: 'string', unique: true },
    customer_id: { type: 'string' },
    record: { type: 'text' },
    response: { type: 'text', nullable: true },
    partial: { type: 'integer' },
    created_at: { type: 'string' },
  },
});

export interface KeyRow {
  key_id: string;
  public_key: string;
  created_at: string;
  signing_authority_id: string;
  signing_key_version: number;
}
export const KeyEntity = new EntitySchema<KeyRow>({
  name: 'KeyRow',
  tableName: 'signing_keys',
  properties: {
    key_id: { type: 'string', primary: true },
    public_key: { type: 'string' },
    created_at: { type: 'string' },
    signing_authority_id: { type: 'string' },
    signing_key_version: { type: 'integer' },
  },
});

export interface IdempotencyRow {
  customer_id: string;
  idem_key: string;
  request_hash: string;
  state: string;
  status: number | null;
  body: string | null;
  headers: string | null;
  created_at: string;
  renewed_at: string | null;
  resource_id: string | null;
}
export const IdempotencyEntity = new EntitySchema<IdempotencyRow>({
  name: 'IdempotencyRow',
  tableName: 'idempotency_keys',
  properties: {
    customer_id: { type: 'string', primary: true },
    idem_key: { type: 'string', primary: true },
    request_hash: { type: 'string' },
    state: { type: 'string' },
    status: { type: 'integer', nullable: true },
    body: { type: 'text', nullable: true },
    headers: { type: 'text', nullable: true },
    created_at: { type: 'string' },
    renewed_at: { type: 'string', nullable: true },
    resource_id: { type: 'string', nullable: true },
  },
});

export interface ContactRow {
  id: string;
  email: string;
  name: string | null;
  company: string | null;
  message: string;
  source: string | null;
  created_at: string;
}
export const ContactEntity = new EntitySchema<ContactRow>({
  name: 'ContactRow',
  tableName: 'contact_messages',
  properties: {
    id: { type: 'string', primary: true },
    email: { type: 'string' },
    name: { type: 'string', nullable: true },
    company: { type: 'string', nullable: true },
    message: { type: 'text' },
    source: { type: 'string', nullable: true },
    created_at: { type: 'string' },
  },
});

export interface CapsulefileRow {
  id: string;
  owner: string;
  name: string;
  status: string;
  definition: string;
  content_hash: string | null;
  size_bytes: number | null;
  file_count: number | null;
  finalized_at: string | null;
  created_at: string;
}
export const CapsulefileEntity = new EntitySchema<CapsulefileRow>({
  name: 'CapsulefileRow',
  tableName: 'capsulefiles',
  properties: {
    id: { type: 'string', primary: true },
    owner: { type: 'string' },
    name: { type: 'string' },
    status: { type: 'string' },
    definition: { type: 'text' },
    content_hash: { type: 'string', nullable: true },
    size_bytes: { type: 'double', nullable: true },
    file_count: { type: 'integer', nullable: true },
    finalized_at: { type: 'string', nullable: true },
    created_at: { type: 'string' },
  },
});

/** File bytes are stored base64 in a text column: one portable type on both drivers. */
export interface CapsulefileFileRow {
  capsulefile_id: string;
  filename: string;
  size_bytes: number;
  sha512: string;
  content_b64: string;
}
export const CapsulefileFileEntity = new EntitySchema<CapsulefileFileRow>({
  name: 'CapsulefileFileRow',
  tableName: 'capsulefile_files',
  properties: {
    capsulefile_id: { type: 'string', primary: true },
    filename: { type: 'string', primary: true },
    size_bytes: { type: 'integer' },
    sha512: { type: 'string' },
    content_b64: { type: 'text', lazy: true },
  },
});

export interface EgressProfileRow {
  id: string;
  customer_id: string;
  name: string;
  description: string;
  created_at: string;
}
export const EgressProfileEntity = new EntitySchema<EgressProfileRow>({
  name: 'EgressProfileRow',
  tableName: 'egress_profiles',
  properties: {
    id: { type: 'string', primary: true },
    customer_id: { type: 'string' },
    name: { type: 'string' },
    description: { type: 'text' },
    created_at: { type: 'string' },
  },
});

export interface EgressRuleRow {
  id: string;
  profile_id: string;
  customer_id: string;
  kind: string;
  value: string;
  port: number;
  created_at: string;
}
export const EgressRuleEntity = new EntitySchema<EgressRuleRow>({
  name: 'EgressRuleRow',
  tableName: 'egress_rules',
  properties: {
    id: { type: 'string', primary: true },
    profile_id: { type: 'string' },
    customer_id: { type: 'string' },
    kind: { type: 'string' },
    value: { type: 'string' },
    port: { type: 'integer' },
    created_at: { type: 'string' },
  },
});

export const ENTITIES = [
  EgressProfileEntity,
  EgressRuleEntity,
  CapsulefileEntity,
  CapsulefileFileEntity,
  ContactEntity,
  AccountEntity,
  ApiKeyEntity,
  CapsuleEntity,
  ActivityEntity,
  ProofEntity,
  KeyEntity,
  IdempotencyEntity,
];
