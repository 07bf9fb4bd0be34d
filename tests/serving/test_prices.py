"""The price catalog (data/prices.json): every price names its source and date, and the GPUs it
does not price say why."""

from __future__ import annotations

import pytest

from kvreplay.errors import ConfigError
from kvreplay.catalog.prices import Prices, catalog
from kvreplay.catalog.gpus import get_gpu


def test_every_price_has_a_source_a_date_and_a_catalog_gpu():
    gpus = catalog()["gpus"]
    assert set(gpus) == {"A100-80GB", "H100", "H200", "A100-40GB", "L4", "GB200", "B300", "MI325X"}
    for name, entry in gpus.items():
        assert get_gpu(name).name == name
        assert entry["source"].startswith("https://") and entry["date"] and entry["note"]
        assert 0 < entry["on_demand_per_hour"] < 20
        if "reserved_per_hour" in entry:
            assert entry["reserved_per_hour"] < entry["on_demand_per_hour"]


def test_the_new_gpus_prices_follow_from_their_sources_figures():
    gpus = catalog()["gpus"]
    # GB200: USD 9.08 per superchip of two GPUs; B300: the middle of USD 5.00-7.25; A100-40GB:
    # AWS p4d.24xlarge's USD 32.77 over its 8 GPUs
    assert gpus["GB200"]["on_demand_per_hour"] == pytest.approx(9.08 / 2)
    assert gpus["B300"]["on_demand_per_hour"] == pytest.approx((5.00 + 7.25) / 2, abs=0.005)
    assert gpus["A100-40GB"]["on_demand_per_hour"] == pytest.approx(32.77 / 8, abs=0.005)
    assert "9.08" in gpus["GB200"]["note"] and "5.00-7.25" in gpus["B300"]["note"] and "32.77" in gpus["A100-40GB"]["note"]
    assert "0.44" in gpus["L4"]["note"] and "1.95" in gpus["MI325X"]["note"]


def test_plan_prices_a_new_gpu_by_alias_and_names_its_source():
    usd, source = Prices().gpu_hour("gb200-nvl72")
    assert usd == 4.54 and source.startswith("https://www.spheron.network/") and "2026-03-17, on-demand" in source


@pytest.mark.parametrize("gpu, why", [
    ("H20", "NVIDIA.s China-market part: no public cloud lists an on-demand price"),
    ("MI355X", "no public on-demand list price per GPU-hour was found"),
])
def test_an_unpriced_gpu_is_refused_with_its_reason(gpu, why):
    with pytest.raises(ConfigError, match=f"no price for {gpu} in the catalog \\({why}.*give --price {gpu}=USD/h"):
        Prices().gpu_hour(gpu)
    assert Prices({gpu: 2.0}).gpu_hour(gpu) == (2.0, "--price")


def test_reserved_pricing_of_a_gpu_priced_on_demand_only_is_refused():
    with pytest.raises(ConfigError, match="no reserved price for L4 in the catalog .* on-demand price only"):
        Prices(pricing="reserved").gpu_hour("L4")
    assert Prices(pricing="reserved").gpu_hour("H100")[0] == 1.80
