"""The `specdec watch` Grafana dashboard, built with Grafana's typed SDK
(``grafana-foundation-sdk``, pinned in pyproject's dev extras to the Grafana 11.6 schema build).

    python3 monitoring/dashboard.py > monitoring/grafana/specdec-watch.json

The committed JSON is this script's output; ``tests/unit/test_watch_monitoring.py`` builds it
again and compares, and reads it back through the SDK's own model
(``Dashboard.from_json``). Panels: verdicts over time per host, live vs gate acceptance length,
estimated live gain against the gate's c=1 gain with the keep and disable levels, traffic
served and the batch sizes, decision age, marked hosts, the watch's own freshness. Every
figure is device time (the exposition's, `specdec.watch.expose`).
"""

from __future__ import annotations

import json
import sys

from grafana_foundation_sdk.builders import common as common_builders
from grafana_foundation_sdk.builders import prometheus, stat, statetimeline, timeseries
from grafana_foundation_sdk.builders import table as tablepanel
from grafana_foundation_sdk.builders.dashboard import (
    Dashboard,
    DatasourceVariable,
    QueryVariable,
    Row,
    ThresholdsConfig,
)
from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.models.common import GraphThresholdsStyleMode
from grafana_foundation_sdk.models.dashboard import (
    DataSourceRef,
    Threshold,
    ThresholdsMode,
    ValueMap,
    ValueMappingResult,
)

DS = DataSourceRef(type_val="prometheus", uid="${datasource}")
HOST = 'host=~"$host"'
# specdec.watch.expose.CODES, with colours
VERDICTS = (("0", "no traffic", "gray"), ("1", "not paying", "red"), ("2", "marginal", "orange"),
            ("3", "paying", "green"), ("4", "favourable (off)", "purple"),
            ("5", "cannot tell", "blue"))


def q(expr: str, legend: str, ref: str = "A") -> prometheus.Dataquery:
    return prometheus.Dataquery().expr(expr).legend_format(legend).ref_id(ref)


def levels() -> ThresholdsConfig:
    """The gate's disable (+10%) and keep (+30%) levels as gain thresholds (the defaults; a
    fleet with its own specdec_gate sees its levels as specdec_watch_keep_level)."""
    return ThresholdsConfig().mode(ThresholdsMode.ABSOLUTE).steps([
        Threshold(value=None, color="red"), Threshold(value=0.10, color="orange"),
        Threshold(value=0.30, color="green")])


def build() -> Dashboard:
    verdict_map = ValueMap(options={k: ValueMappingResult(text=t, color=c, index=int(k))
                                    for k, t, c in VERDICTS})
    return (
        Dashboard("specdec: is speculation still paying?").uid("specdec-watch")
        .tags(["specdec", "speculative-decoding"]).refresh("30s").time("now-6h", "now")
        .description("specdec watch: live acceptance and estimated speed-up per host on its "
                     "own traffic, against what the deploy's gate measured (device time).")
        .with_variable(DatasourceVariable("datasource").label("Prometheus").type("prometheus"))
        .with_variable(QueryVariable("host").label("Host").datasource(DS)
                       .query("label_values(specdec_watch_up, host)").multi(True)
                       .include_all(True))
        .with_row(Row("Verdicts"))
        .with_panel(statetimeline.Panel().title("Verdict over time").datasource(DS)
                    .with_target(q(f"specdec_watch_verdict_code{{{HOST}}}", "{{host}}"))
                    .mappings([verdict_map]).show_value("never").height(8).span(16))
        .with_panel(stat.Panel().title("Hosts not paying").datasource(DS)
                    .with_target(q('count(specdec_watch_verdict{verdict="not paying"} == 1) '
                                   "or vector(0)", "not paying"))
                    .height(4).span(4))
        .with_panel(stat.Panel().title("Marked for re-verification").datasource(DS)
                    .with_target(q("sum(specdec_watch_reverify_marked) or vector(0)", "marked"))
                    .height(4).span(4))
        .with_panel(stat.Panel().title("Watch last looked").datasource(DS)
                    .with_target(q("time() - max(specdec_watch_last_update_timestamp_seconds)",
                                   "seconds ago"))
                    .unit("s").height(4).span(8))
        .with_row(Row("Acceptance and gain"))
        .with_panel(timeseries.Panel().title("Acceptance length: live vs gate").datasource(DS)
                    .with_target(q(f"specdec_watch_live_acceptance_length{{{HOST}}}",
                                   "{{host}} live"))
                    .with_target(q(f"specdec_watch_gate_acceptance_length{{{HOST}}}",
                                   "{{host}} gate", "B"))
                    .unit("none").min(1).height(8).span(12))
        .with_panel(timeseries.Panel().title("Estimated live gain vs the gate's c=1 gain")
                    .description("Speed-up - 1 at the batch sizes served; lines: the gate's "
                                 "disable (+10%) and keep (+30%) levels")
                    .datasource(DS)
                    .with_target(q(f"specdec_watch_estimated_speedup{{{HOST}}} - 1",
                                   "{{host}} live (est.)"))
                    .with_target(q(f"specdec_watch_gate_speedup_c1{{{HOST}}} - 1",
                                   "{{host}} gate c=1", "B"))
                    .unit("percentunit").thresholds(levels())
                    .thresholds_style(common_builders.GraphThresholdsStyleConfig()
                                      .mode(GraphThresholdsStyleMode.DASHED))
                    .height(8).span(12))
        .with_row(Row("Traffic served"))
        .with_panel(timeseries.Panel().title("Tokens per device second").datasource(DS)
                    .with_target(q(f"specdec_watch_tokens_per_second{{{HOST}}}", "{{host}}"))
                    .unit("short").min(0).height(8).span(8))
        .with_panel(timeseries.Panel().title("Mean requests running while busy")
                    .datasource(DS)
                    .with_target(q(f"specdec_watch_mean_batch{{{HOST}}}", "{{host}}"))
                    .unit("short").min(0).height(8).span(8))
        .with_panel(tablepanel.Panel().title("Gate decision age").datasource(DS)
                    .with_target(q(f"specdec_watch_decision_age_seconds{{{HOST}}}",
                                   "{{host}} {{decision}}").instant().format("table"))
                    .unit("s").height(8).span(8))
    )


def render() -> str:
    return json.dumps(build().build(), cls=JSONEncoder, sort_keys=True, indent=2) + "\n"


if __name__ == "__main__":
    sys.stdout.write(render())
