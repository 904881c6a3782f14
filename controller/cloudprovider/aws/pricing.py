"""On-demand prices from the AWS Pricing API, with the shipped us-east-1 table where it does not answer.

The Pricing API lives in a few regions only; a region's prices are asked of
the nearest one, as Karpenter does. Its answer is kept for 12 hours (list
prices change rarely). When it fails, the last answer stays in use, and
before any answer the shipped table does, so launching never waits on it.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any, Callable, Iterable

import botocore.exceptions

log = logging.getLogger("controller.cloudprovider.aws")
PRICING_TTL_SECONDS = 12 * 3600.0
RETRY_AFTER_FAILURE_SECONDS = 60.0


def pricing_region(region: str) -> str:
    """The Pricing API endpoint that serves `region`: Mumbai for Asia Pacific, Frankfurt for Europe and nearby,
    N. Virginia for the rest."""
    if region.startswith("ap-"):
        return "ap-south-1"
    if region.startswith(("eu-", "me-", "af-", "il-")):
        return "eu-central-1"
    return "us-east-1"


def product_filters(region: str) -> list[dict[str, str]]:
    """Shared-tenancy Linux instances without preinstalled software, as used (not reserved) capacity."""
    wanted = {"regionCode": region, "operatingSystem": "Linux", "tenancy": "Shared", "preInstalledSw": "NA",
              "capacitystatus": "Used", "productFamily": "Compute Instance"}
    return [{"Type": "TERM_MATCH", "Field": k, "Value": v} for k, v in wanted.items()]


def on_demand_prices(price_list: Iterable[str]) -> dict[str, float]:
    """instance type -> USD per hour, from GetProducts' PriceList (one JSON document per product). Pure."""
    prices: dict[str, float] = {}
    for document in price_list:
        product = json.loads(document)
        name = ((product.get("product") or {}).get("attributes") or {}).get("instanceType")
        for term in ((product.get("terms") or {}).get("OnDemand") or {}).values():
            for dimension in (term.get("priceDimensions") or {}).values():
                usd = float((dimension.get("pricePerUnit") or {}).get("USD") or 0)
                if name and usd > 0:
                    prices[name] = usd
    return prices


class OnDemandPricing:
    def __init__(self, client: Any, region: str, fallback: dict[str, float], *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.client, self.region, self.fallback, self.clock = client, region, fallback, clock
        self._lock = threading.Lock()
        self._answer: dict[str, float] = {}
        self._next_read = 0.0

    @property
    def source(self) -> str:
        """Where the on-demand prices in use come from."""
        return "Pricing API" if self._answer else "shipped table"

    def prices(self) -> dict[str, float]:
        with self._lock:
            if self.clock() >= self._next_read:
                self._refresh()
            return {**self.fallback, **self._answer}

    def _refresh(self) -> None:
        try:
            pages = self.client.get_paginator("get_products").paginate(
                ServiceCode="AmazonEC2", Filters=product_filters(self.region), FormatVersion="aws_v1")
            answer = on_demand_prices(item for page in pages for item in page.get("PriceList") or [])
        except (botocore.exceptions.BotoCoreError, botocore.exceptions.ClientError, ValueError) as e:
            self._next_read = self.clock() + RETRY_AFTER_FAILURE_SECONDS
            log.warning("The AWS Pricing API did not answer (%s); on-demand prices come from the %s", e,
                        "last answer" if self._answer else "shipped table")
            return
        self._next_read = self.clock() + PRICING_TTL_SECONDS
        if not answer:
            log.warning("The AWS Pricing API knows no on-demand prices for %s; the shipped table stays in use", self.region)
            return
        self._answer = answer
        log.info("Read %d on-demand prices for %s from the AWS Pricing API", len(answer), self.region)
