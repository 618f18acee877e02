import type { Client, ClientConfig, Pool } from 'pg';

export interface HoldOptions {
  /** Owner name; default host:pid:random. Must be unique among running holders. */
  owner?: string;
  /** TTL in milliseconds; default 20000, at least 100. */
  ttl?: number;
  /** How long to keep asking while another owner holds the lease, in ms; default 0 (one try). */
  wait?: number;
  /** Time your code has to stop after the loss signal, in ms; default ttl/5, at most ttl/2. */
  grace?: number;
  /** One of this many permits (1 to 10000) of semaphore name (lease.semaphore_acquire). */
  permits?: number;
  /** A shared grant beside other shared holders (lease.lease_acquire_shared); not with permits. */
  shared?: boolean;
}

/** One live holder of a name, from leader(). */
export interface Holder {
  owner: string;
  token: bigint;
  /** What it published (setValue); null before. */
  value: unknown;
  expiresAt: Date;
}

/** Who holds name now and what each published (lease.leader): one per live holder. */
export function leader(db: Client | Pool | string | ClientConfig, name: string): Promise<Holder[]>;

export class Lease {
  readonly name: string;
  /** The names held: one, or those of holdAll in their order. */
  readonly names: string[];
  readonly owner: string;
  readonly ttl: number;
  /** The fencing token of this grant (null for several names: tokenOf). */
  readonly token: bigint;
  /** Each name's token. */
  readonly tokens: Map<string, bigint>;
  tokenOf(name: string): bigint;
  /** Publishes value for the grant of one name; false if its token is no longer live. */
  setValue(value: unknown, client?: Client): Promise<boolean>;
  /** Aborted, with a LeaseLostError as its reason, when the lease is lost. */
  readonly signal: AbortSignal;
  readonly lost: boolean;
  /** Throws the LeaseLostError if the lease has been lost. */
  check(): void;
  /** Fences the transaction open on client (after BEGIN). */
  fence(client: Client): Promise<void>;
  /** Runs fn in a fenced transaction on a client, or on a client checked out of a pool. */
  transaction<T>(db: Client | Pool, fn: (client: Client) => Promise<T>): Promise<T>;
  /** true: released; false: the server could not be reached. Rejects with LeaseLostError if lost. */
  release(): Promise<boolean>;
}

/**
 * A libpq connection string (keyword = value pairs or a postgresql:// URI) as
 * a pg config; a config object passes as it is. Throws a TypeError when it is
 * missing or malformed.
 */
export function clientConfig(connection: string | ClientConfig): ClientConfig;

export function hold(connection: string | ClientConfig, name: string, options?: HoldOptions): Promise<Lease>;
/** Every lease of names or none (lease.lease_acquire_all), held and heartbeated together. */
export function holdAll(connection: string | ClientConfig, names: string[], options?: HoldOptions): Promise<Lease>;
export function withAll<T>(
  connection: string | ClientConfig,
  names: string[],
  options: HoldOptions | undefined,
  fn: (lease: Lease) => Promise<T>,
): Promise<T>;
export function withLease<T>(
  connection: string | ClientConfig,
  name: string,
  options: HoldOptions | undefined,
  fn: (lease: Lease) => Promise<T>,
): Promise<T>;

/** SQLSTATE LF001: a write under a stale or expired token was rejected. `cause` is pg's DatabaseError. */
export class FencedError extends Error {
  readonly code: 'LF001';
  /** The server's DETAIL (the message ends with it too). */
  readonly detail: string | undefined;
}
export class NotAcquiredError extends Error {}
export class LeaseLostError extends Error {}
/** Whether err is LF001 (a FencedError, or pg's DatabaseError with that code). */
export function isFenced(err: unknown): boolean;

export interface SessionOptions {
  /** Owner name; default host:pid:random. */
  owner?: string;
  /** TTL in milliseconds; default 20000, at least 100. */
  ttl?: number;
  /** Time your code has to stop after the loss signal, in ms; default ttl/5, at most ttl/2. */
  grace?: number;
}

/** A lease held under a Session: live while the session is. */
export class SessionLease {
  readonly session: Session;
  readonly name: string;
  readonly names: string[];
  readonly token: bigint;
  readonly tokens: Map<string, bigint>;
  tokenOf(name: string): bigint;
  setValue(value: unknown, client?: Client): Promise<boolean>;
  /** What the pool resource's last holder checkpointed (null for Session.acquire). */
  readonly state: unknown;
  readonly signal: AbortSignal;
  readonly lost: boolean;
  check(): void;
  fence(client: Client): Promise<void>;
  transaction<T>(db: Client | Pool, fn: (client: Client) => Promise<T>): Promise<T>;
  /** false, and nothing changed, if the token is stale. With client: in its open transaction. */
  checkpoint(state: unknown, client?: Client): Promise<boolean>;
  release(): Promise<boolean>;
}

/** A session: one keepalive for every lease acquired or claimed under it. */
export class Session {
  readonly id: bigint;
  readonly owner: string;
  readonly ttl: number;
  readonly signal: AbortSignal;
  readonly lost: boolean;
  check(): void;
  acquire(name: string, options?: { wait?: number; permits?: number; shared?: boolean }): Promise<SessionLease>;
  acquireAll(names: string[], options?: { wait?: number }): Promise<SessionLease>;
  claim(pool: string, options?: { max?: number }): Promise<SessionLease[]>;
  surplus(pool: string): Promise<string[]>;
  /** Closes the session, releasing every lease it still holds. Rejects with LeaseLostError if it was lost. */
  close(): Promise<boolean>;
}

export function session(connection: string | ClientConfig, options?: SessionOptions): Promise<Session>;
export function withSession<T>(
  connection: string | ClientConfig,
  options: SessionOptions | undefined,
  fn: (session: Session) => Promise<T>,
): Promise<T>;

/** A lease event (docs/concepts.md, "Events and history"). */
export class Event {
  /** acquired, released, revoked, expired, session_closed, value_set. */
  readonly event: string;
  readonly name: string | null;
  readonly token: bigint | null;
  readonly owner: string | null;
  readonly session: bigint | null;
  /** "XID/N", to resume from (watch's since); null for an event not recorded in lease.history. */
  readonly position: string | null;
  /** What an acquired or value_set event published; null when replayed (not kept in history). */
  readonly value: unknown;
  /** Read from lease.history rather than received live. */
  readonly replayed: boolean;
}

export interface WatchOptions {
  /** A position ("7421/3": resume after it) or a Date (the events recorded from then on); default: from now. */
  since?: string | Date | null;
  /** Pause before connecting again after a lost connection, in ms; default 1000. */
  reconnectInterval?: number;
}

/**
 * Every lease event in position order, each once, replaying lease.history after
 * a lost or silent connection; leaving the for await loop closes the connection.
 * A bad since throws a TypeError at once.
 */
export function watch(connection: string | ClientConfig, options?: WatchOptions): AsyncGenerator<Event, never, undefined>;
