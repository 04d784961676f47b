"""The run trace's tables keyed by tenant (Citus distributes them by `tenant_id`, co-located; issue 50).

- Primary keys (tenant_id, id) on conversations, runs, steps, citations, evidence and feedback.
- The unique constraints that lacked it start with tenant_id: a run's turn in its conversation, a step's and
  a citation's ordinal in its run.
- Foreign keys between these tables (`db_constraint=False` in Django, whose PROTECT still runs in Python) are
  (tenant_id, x_id) -> (tenant_id, id), NO ACTION, deferred to commit as Django made them. Evidence's key to
  its department was converted by tenants 0008.

Keys and indexes only: the append-only triggers do not fire (no row is updated), and no hash of the chain
(agents.chain) changes. Reversible.
"""
import django.db.models.deletion
from django.db import migrations, models

from tenants.tenant_keys import key_by_tenant

PROTECT = django.db.models.deletion.PROTECT

STATE = [
    migrations.AlterField("run", "conversation", models.ForeignKey(
        blank=True, db_constraint=False, null=True, on_delete=PROTECT, related_name="runs", to="agents.conversation")),
    migrations.AlterField("runstep", "run", models.ForeignKey(db_constraint=False, on_delete=PROTECT, related_name="steps",
                                                              to="agents.run")),
    migrations.AlterField("citation", "run", models.ForeignKey(db_constraint=False, on_delete=PROTECT, related_name="citations",
                                                               to="agents.run")),
    migrations.AlterField("feedback", "run", models.ForeignKey(db_constraint=False, on_delete=PROTECT, related_name="feedback",
                                                               to="agents.run")),
    migrations.AlterField("evidence", "department", models.ForeignKey(
        blank=True, db_constraint=False, null=True, on_delete=PROTECT, related_name="+", to="tenants.department")),
]

# (model, name, new fields)
UNIQUES = [
    ("run", "uniq_run_conversation_turn", ("tenant", "conversation", "turn")),
    ("runstep", "uniq_runstep_ordinal", ("tenant", "run", "ordinal")),
    ("citation", "uniq_citation_ordinal", ("tenant", "run", "ordinal")),
]

TABLES = ["agents_conversation", "agents_run", "agents_runstep", "agents_citation", "agents_evidence", "agents_feedback"]


class Migration(migrations.Migration):
    dependencies = [
        ("agents", "0009_runstep_model_input_help"),
        ("tenants", "0008_tenant_keys"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=STATE),
        *[migrations.RemoveConstraint(model, name) for model, name, _ in UNIQUES],
        *[migrations.AddConstraint(model, models.UniqueConstraint(fields=new, name=name)) for model, name, new in UNIQUES],
        *[key_by_tenant(table) for table in TABLES],
    ]
