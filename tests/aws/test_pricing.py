"""On-demand prices from the Pricing API (played by the loopback proxy, speaking its JSON protocol), and the
shipped table when it does not answer."""

from __future__ import annotations

import json

import pytest

from karpy.apis import labels as wk
from karpy.controller.cloudprovider.aws.pricing import on_demand_prices, pricing_region
from tests.aws.conftest import Moto, provider
from tests.aws.faults import FaultProxy, Reply, Request
from tests.simulator.conftest import Kube

pytestmark = pytest.mark.slow      # starts a moto server on loopback


def product(instance_type: str, usd: str, sku: str) -> str:
    """One PriceList entry as GetProducts returns it: a JSON document in a string."""
    return json.dumps({
        "product": {"productFamily": "Compute Instance", "sku": sku, "attributes": {
            "instanceType": instance_type, "regionCode": "us-east-1", "operatingSystem": "Linux", "tenancy": "Shared",
            "preInstalledSw": "NA", "capacitystatus": "Used", "vcpu": "2"}},
        "serviceCode": "AmazonEC2", "version": "20261101", "publicationDate": "2026-11-01T00:00:00Z",
        "terms": {"OnDemand": {f"{sku}.JRTCKXETXF": {
            "offerTermCode": "JRTCKXETXF", "sku": sku, "effectiveDate": "2026-11-01T00:00:00Z", "termAttributes": {},
            "priceDimensions": {f"{sku}.JRTCKXETXF.6YS6EN2CT7": {
                "unit": "Hrs", "beginRange": "0", "endRange": "Inf", "appliesTo": [], "rateCode": f"{sku}.JRTCKXETXF.6YS6EN2CT7",
                "description": f"${usd} per On Demand Linux {instance_type} Instance Hour", "pricePerUnit": {"USD": usd}}}}}},
    })


def test_prices_are_read_from_the_price_list_documents() -> None:
    assert on_demand_prices([product("m5.large", "0.0960000000", "A"), product("c5.large", "0.0000000000", "B")]) == \
        {"m5.large": 0.096}                                         # a zero price is not a price
    assert [pricing_region(r) for r in ("us-west-2", "eu-west-1", "ap-northeast-1", "sa-east-1")] == \
        ["us-east-1", "eu-central-1", "ap-south-1", "us-east-1"]


def test_on_demand_prices_come_from_the_pricing_api_when_it_answers(
        moto: Moto, proxy: FaultProxy, kube: Kube, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL_PRICING", proxy.url)
    pages = {None: ([product("m5.large", "0.5000000000", "A")], "page-2"), "page-2": ([product("m5.xlarge", "0.7", "B")], None)}

    def get_products(request: Request, _: object) -> Reply:
        asked = json.loads(request.body)
        price_list, next_token = pages[asked.get("NextToken")]
        return Reply(200, json.dumps({"FormatVersion": "aws_v1", "PriceList": price_list,
                                      **({"NextToken": next_token} if next_token else {})}).encode(),
                     "application/x-amz-json-1.1")
    proxy.on("GetProducts", get_products)
    cloud = provider(kube)
    prices = {t.name: {o.price_per_hour for o in t.offerings if o.capacity_type == wk.CAPACITY_TYPE_ON_DEMAND}
              for t in cloud.instance_types()}
    assert prices["m5.large"] == {0.5} and prices["m5.xlarge"] == {0.7}
    assert prices["c5.large"] == {0.085}                             # not in the answer: the shipped table's
    assert cloud.pricing.source == "Pricing API"
    (first, *_) = proxy.sent("GetProducts")
    asked = json.loads(first.body)
    assert asked["ServiceCode"] == "AmazonEC2"
    assert {"Type": "TERM_MATCH", "Field": "regionCode", "Value": "us-east-1"} in asked["Filters"]
    assert proxy.seen["GetProducts"] == 2                             # both pages


def test_the_shipped_table_stands_in_when_the_pricing_api_does_not_answer(moto: Moto, kube: Kube) -> None:
    cloud = provider(kube)                                      # the moto fixture refuses Pricing connections
    m5 = next(t for t in cloud.instance_types() if t.name == "m5.large")
    assert {o.price_per_hour for o in m5.offerings if o.capacity_type == wk.CAPACITY_TYPE_ON_DEMAND} == {0.096}
    assert cloud.pricing.source == "shipped table"
