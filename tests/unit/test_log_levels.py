"""`log.levels`: one logger's level over `log.level`, where Kafka would use its log4j configuration; the
audit log (`kafka.authorizer.logger`) turned to DEBUG alone shows grants while the rest stays at INFO."""

from __future__ import annotations

import io
import json
import logging

import pytest
import structlog

from odradek.broker.config import BrokerConfig, ConfigError, load_config
from odradek.broker.logging import configure_logging, get_logger


def test_log_levels_parse_from_the_file_the_environment_and_overrides(tmp_path):
    config = BrokerConfig.from_properties({"log.levels": "kafka.authorizer.logger=debug, odradek.broker.network=WARN"})
    assert config.log_levels == {"kafka.authorizer.logger": "DEBUG", "odradek.broker.network": "WARNING"}
    rendered = config.to_properties()["log.levels"]  # as DescribeConfigs shows it: in the form it is written
    assert rendered == "kafka.authorizer.logger=DEBUG,odradek.broker.network=WARNING"
    assert BrokerConfig.from_properties({"log.levels": rendered}).log_levels == config.log_levels
    assert load_config(None, env={"ODRADEK_LOG_LEVELS": "kafka.authorizer.logger=TRACE"}).log_levels == {
        "kafka.authorizer.logger": "DEBUG"}
    assert BrokerConfig().log_levels == {}
    for bad in ("kafka.authorizer.logger", "kafka.authorizer.logger=LOUD", "a=INFO,a=DEBUG", "=INFO"):
        with pytest.raises(ConfigError) as refused:
            BrokerConfig.from_properties({"log.levels": bad})
        assert refused.value.key == "log.levels"


@pytest.fixture
def rendered():
    buf = io.StringIO()
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        yield buf
    finally:
        configure_logging("json", "INFO", stream=io.StringIO())  # puts the levelled loggers back to NOTSET
        for handler in list(root.handlers):
            if handler not in handlers:
                root.removeHandler(handler)
        root.setLevel(level)
        logging.captureWarnings(False)
        structlog.reset_defaults()


def test_one_logger_to_debug_and_one_module_quietened(rendered):
    configure_logging("json", "INFO", stream=rendered,
                      levels={"kafka.authorizer.logger": "DEBUG", "odradek.broker.network": "WARN"})
    get_logger("kafka.authorizer.logger").debug("a grant")
    get_logger("odradek.broker.server").debug("not shown: the root is at INFO")
    get_logger("odradek.broker.server").info("shown")
    get_logger("odradek.broker.network").info("not shown: this module is at WARN")
    get_logger("odradek.broker.network").warning("shown too")
    lines = [(line["logger"], line["event"]) for line in map(json.loads, rendered.getvalue().splitlines())]
    assert lines == [("kafka.authorizer.logger", "a grant"), ("odradek.broker.server", "shown"),
                     ("odradek.broker.network", "shown too")]
    assert logging.getLogger("kafka.authorizer.logger").isEnabledFor(logging.DEBUG)  # what the authorizer asks

    configure_logging("json", "INFO", stream=rendered)  # a new configuration forgets the old levels
    assert logging.getLogger("kafka.authorizer.logger").level == logging.NOTSET
    assert not logging.getLogger("kafka.authorizer.logger").isEnabledFor(logging.DEBUG)
