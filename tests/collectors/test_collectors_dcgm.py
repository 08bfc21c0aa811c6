"""DCGM exporter scraping against a local HTTP server serving hand-written Prometheus text."""

from __future__ import annotations

import http.server
import threading

import numpy as np
import pytest
from profkit.collectors.nvml.dcgm import DcgmScraper, dcgm_rows, parse_prometheus
from profkit.collectors.nvml.sampler import SOURCE_DCGM, NvmlSampler

# Hand-written in dcgm-exporter's format (not captured from a real exporter).
SAMPLE = """\
# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{gpu="0",UUID="GPU-aaaa",pci_bus_id="00000000:18:00.0",device="nvidia0",modelName="NVIDIA H200",Hostname="node1"} 1980
DCGM_FI_DEV_SM_CLOCK{gpu="1",UUID="GPU-bbbb",pci_bus_id="00000000:2A:00.0",device="nvidia1",modelName="NVIDIA H200",Hostname="node1"} 1755
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu="0",UUID="GPU-aaaa",device="nvidia0"} 512.25
DCGM_FI_DEV_POWER_USAGE{gpu="1",UUID="GPU-bbbb",device="nvidia1"} 120.5
DCGM_FI_DEV_FB_USED{gpu="0",UUID="GPU-aaaa",device="nvidia0"} 1024
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu="0",UUID="GPU-aaaa",device="nvidia0"} 0.625
DCGM_FI_PROF_PCIE_TX_BYTES{gpu="0",UUID="GPU-aaaa",device="nvidia0"} 2097152
DCGM_FI_DEV_XID_ERRORS{gpu="0",UUID="GPU-aaaa",device="nvidia0",err_code="0",err_msg="No Error"} 0
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-aaaa",device="nvidia0"} 41 1700000000000
not a metric line {
"""


def test_parse_prometheus_text():
    samples = parse_prometheus(SAMPLE)
    assert len(samples) == 9  # comments and the malformed line are skipped
    name, labels, value = samples[0]
    assert name == "DCGM_FI_DEV_SM_CLOCK" and value == 1980.0
    assert labels["UUID"] == "GPU-aaaa" and labels["modelName"] == "NVIDIA H200"
    assert samples[-1][2] == 41.0  # value before an optional timestamp


def test_rows_map_names_and_units_and_filter_uuid():
    rows = dict(dcgm_rows(parse_prometheus(SAMPLE), uuids=["GPU-aaaa"]))
    assert list(rows) == [0]
    r = rows[0]
    assert r["sm_clock_mhz"] == 1980 and r["power_w"] == 512.25 and r["temp_c"] == 41
    assert r["mem_used_bytes"] == 1024 * 2**20  # MiB -> bytes
    assert r["gpm_tensor_active_pct"] == 62.5  # ratio -> percent
    assert r["pcie_tx_mibps"] == 2.0  # bytes/s -> MiB/s
    assert len(dict(dcgm_rows(parse_prometheus(SAMPLE)))) == 2


@pytest.fixture
def exporter():
    class Handler(http.server.BaseHTTPRequestHandler):
        hits = 0

        def do_GET(self):  # noqa: N802
            Handler.hits += 1
            body = SAMPLE.encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass

    srv = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/metrics", Handler
    srv.shutdown()
    srv.server_close()


def test_scraper_rate_limited_into_sampler_columns(tmp_path, exporter, fake_clock):
    url, handler = exporter
    clock = fake_clock(step_ns=400_000_000)
    scraper = DcgmScraper(url, uuids=["GPU-aaaa"], interval_s=1.0)
    s = NvmlSampler(tmp_path, 0, [], nvml=None, clock=clock, dcgm=scraper)
    assert s.open()
    for _ in range(8):
        s.sample_once()
    d = dict(np.load(s.flush()))
    assert handler.hits == 3  # ticks 0.4 s apart, scraped at 0, 1.2 and 2.4 s
    assert set(d["source"].tolist()) == {SOURCE_DCGM}
    assert d["sm_clock_mhz"].tolist() == [1980.0] * 3
    assert np.isnan(d["energy_mj"]).all()


def test_unreachable_exporter_is_not_fatal(caplog):
    scraper = DcgmScraper("http://127.0.0.1:9/metrics", timeout_s=0.2)
    assert scraper.poll(10**18) == []
    assert scraper.poll(10**18 + 2 * 10**9) == []
    assert scraper.failures == 2
    assert sum("DCGM" in r.getMessage() for r in caplog.records) == 1
