"""The database driver layer of a search: statement scripts that set the scope's RLS tenant (and its proof) first,
prepared statements with generic plans, and the search's transaction (or none)."""

from __future__ import annotations

import contextlib
import hashlib
import re
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from django.db import DatabaseError, connections, transaction

from kb.retrieval.tunables import _setting
from tenants.db_wall import tenant_statements
from tenants.scope import Scope


class TenantStatements:
    """The RLS tenant of one search: every statement script it runs sets it first (see query)."""

    def __init__(self, tenant_id: int, nested: bool, using: str) -> None:
        self.tenant = str(int(tenant_id))
        self.nested = nested
        self.using = using
        self.previous: str | None = None  # the enclosing transaction's tenant (nested only), read by the first script
        self.pending: tuple[str, list, Callable[[list[tuple]], None]] | None = None  # see defer

    def defer(self, sql: str, params: Sequence, check: Callable[[list[tuple]], None]) -> None:
        """Send the one statement `sql` ahead of the next script (no round trip of its own) and give its
        rows to `check` before that script's results are returned: `check` raises to discard them.
        `flush` runs it alone if no script follows."""
        self.pending = (sql, list(params), check)

    def flush(self) -> None:
        """Run a deferred statement that no script has carried yet (and its check)."""
        if self.pending is not None:
            self.query("SELECT 1")

    def query(self, sql: str, params: Sequence = ()) -> list[list[tuple]]:
        """Run `sql` (one or more statements) in one round trip, the scope's tenant set first.

        Outside a transaction the script is its own implicit transaction (a multi-statement simple
        query), so SET LOCAL lasts exactly as long as it; inside the caller's transaction it lasts to
        its end and search() restores the tenant. The tenant goes with its proof (tenants.db_wall:
        SET LOCAL statements formatted from an int and hex digits). A deferred statement (see defer)
        runs right after the tenant is set; its check sees its rows before anything of `sql` is returned.
        """
        head = tenant_statements(int(self.tenant)) + "; "
        head_params: list = []
        if self.nested and self.previous is None:
            head = "SELECT current_setting('app.tenant_id', true); " + head
        pending, self.pending = self.pending, None
        if pending is not None:
            head += pending[0] + "; "
            head_params += pending[1]
        try:
            with connections[self.using].cursor() as cur:
                results = _run_script_all(cur, head + sql, [*head_params, *params])
        except Exception:
            self.pending = pending  # not run: the next script (a retry) carries it
            raise
        if self.nested and self.previous is None:
            self.previous = results.pop(0)[0][0] or ""
        if pending is not None:
            pending[2](results.pop(0))
        return results

    def query_prepared(self, sql: str, params: Sequence, before: str = "", after: str = "",
                       retry: bool = True) -> list[tuple]:
        """The rows of one statement, run as a prepared statement of this connection with a generic plan.

        Prepared because planning a ranking statement can cost more than executing it (figures:
        docs/retrieval.md, "Vector search"). `sql` uses %s placeholders; equal
        SharedParameter parameters (the query vector literal) become one, so the vector is sent and
        parsed once. The statement is named by a hash of its text (which inlines the model key and,
        for vector statements, the tenant id) and prepared in the same script the first time this
        connection runs it. `before` (SET LOCALs) runs ahead of it: the generic plan is made on
        the first execution, under them; `after` follows it. Every parameter, the tenant's
        included, travels with each execution; nothing about the scope is cached but the plan.
        """
        conn = connections[self.using]
        conn.ensure_connection()
        if not _setting("RETRIEVAL_PREPARED_STATEMENTS") or getattr(conn.connection, "prepare_threshold", None) is not None:
            # Switched off, or psycopg prepares statements itself and may DEALLOCATE ALL (ours too).
            return self.query(f"{before}{sql}{after}", [str(p) if isinstance(p, SharedParameter) else p for p in params])[0]
        text, args = _numbered(sql, params)
        state = _prepared_state(conn.connection)
        name = f"kb_{state.generation}_{hashlib.blake2b(text.encode(), digest_size=8).hexdigest()}"
        head = ""
        if name in state.names:
            state.names.move_to_end(name)
        else:
            while len(state.names) >= _PREPARED_MAX:
                head += f"DEALLOCATE {state.names.popitem(last=False)[0]}; "
            head += f"PREPARE {name} AS {text.replace('%', '%%')}; "
        script = (f"{before}SET LOCAL plan_cache_mode = force_generic_plan; {head}"
                  f"EXECUTE {name}({', '.join(['%s'] * len(args))}){after}")
        if self.nested:
            script += "; SET LOCAL plan_cache_mode TO DEFAULT"
        try:
            rows = self.query(script, args)[0]
        except DatabaseError as exc:
            # The session's statements are unknown now (a PREPARE outlives a failed script, and
            # a DISCARD ALL elsewhere drops them): new names from here on.
            state.generation += 1
            state.names.clear()
            if self.nested or not retry or getattr(exc.__cause__, "sqlstate", None) != "26000":
                raise
            return self.query_prepared(sql, params, before, after, retry=False)  # autocommit: nothing to undo
        state.names[name] = None
        return rows


_PREPARED_MAX = 128  # prepared statements kept per connection (least recently used ones are deallocated)


@dataclass
class _PreparedState:
    generation: int = 0
    names: OrderedDict[str, None] = field(default_factory=OrderedDict)


_prepared: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # raw connection -> _PreparedState


_prepared_generation = [0]


def _prepared_state(raw) -> _PreparedState:
    """The statements this process prepared on `raw` (a new connection starts empty)."""
    state = _prepared.get(raw)
    if state is None:
        _prepared_generation[0] += 1
        state = _prepared[raw] = _PreparedState(generation=_prepared_generation[0])
    return state


class SharedParameter(str):
    """A statement parameter passed once however often the statement names it (the query vector)."""


def _numbered(sql: str, params: Sequence) -> tuple[str, list]:
    """`sql` with %s placeholders as $1..$n, equal SharedParameter parameters sharing one number."""
    args: list = []
    seen: dict[str, int] = {}
    values = iter(params)

    def number(_: re.Match) -> str:
        value = next(values)
        if isinstance(value, SharedParameter):
            if value in seen:
                return f"${seen[value]}"
            seen[value] = len(args) + 1
            value = str(value)
        args.append(value)
        return f"${len(args)}"

    return re.sub(r"%s", number, sql), args


@contextlib.contextmanager
def _tenant_transaction(scope: Scope, using: str) -> Iterator[TenantStatements]:
    """What tenants.scope.activate gives (RLS for the scope's tenant), without its round trips.

    Outside a transaction: no transaction of its own (no BEGIN, COMMIT or restore); each script
    of statements sets the tenant and is atomic by itself (READ COMMITTED takes a snapshot per
    statement anyway). Inside the caller's transaction: a savepoint, and the caller's tenant is
    put back on success unless it was this one already; on error the savepoint rollback restores it.
    """
    conn = connections[using]
    if not conn.in_atomic_block and conn.get_autocommit():
        yield TenantStatements(scope.tenant_id, nested=False, using=using)
        return
    with transaction.atomic(using=using):
        tx = TenantStatements(scope.tenant_id, nested=True, using=using)
        yield tx
        if tx.previous is not None and tx.previous != tx.tenant and not conn.needs_rollback:
            previous = int(tx.previous) if tx.previous.isdigit() and int(tx.previous) > 0 else None
            with conn.cursor() as cur:
                cur.execute(tenant_statements(previous))


def _run_script_all(cur, sql: str, params: list) -> list[list[tuple]]:
    """Execute several statements in one round trip (client-side binding); the rows of each that returns rows."""
    cur.execute(sql, params)
    raw = getattr(cur, "cursor", cur)
    out: list[list[tuple]] = []
    while True:
        if raw.description is not None:
            out.append(raw.fetchall())
        if not raw.nextset():
            break
    return out

