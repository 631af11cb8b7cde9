#pragma clang diagnostic ignored "-Wmissing-prototypes"

#include <metal_stdlib>
#include <simd/simd.h>

using namespace metal;

struct _5
{
    uint _m0;
    uint _m1;
    uint _m2;
    uint _m3;
    uint _m4;
    float _m5;
};

struct _12
{
    float _m0[1];
};

struct _15
{
    int _m0[1];
};

struct _18
{
    float _m0[1];
};

struct _21
{
    float _m0[1];
};

struct _24
{
    _5 _m0;
};

static inline __attribute__((always_inline))
uint _26(uint _28, uint _29)
{
    return _28 % ((_29 == 0u) ? 1u : _29);
}

static inline __attribute__((always_inline))
uint _36(uint _37, uint _38)
{
    return _37 / ((_38 == 0u) ? 1u : _38);
}

kernel void main0(const device _12& _11 [[buffer(0)]], const device _15& _14 [[buffer(1)]], const device _18& _17 [[buffer(2)]], device _21& _20 [[buffer(3)]], const device _24& _23 [[buffer(4)]], uint3 gl_WorkGroupID [[threadgroup_position_in_grid]], uint3 gl_NumWorkGroups [[threadgroups_per_grid]], uint gl_LocalInvocationIndex [[thread_index_in_threadgroup]])
{
    uint _64 = 0u;
    bool _67 = false;
    uint _70 = 0u;
    uint _79 = (((gl_WorkGroupID.y * gl_NumWorkGroups.x) + gl_WorkGroupID.x) * 64u) + gl_LocalInvocationIndex;
    if (_79 >= _23._m0._m0)
    {
        return;
    }
    uint _88 = _26(_79, _23._m0._m1);
    if (_88 >= _23._m0._m3)
    {
        _20._m0[_79] = _11._m0[_79];
        return;
    }
    uint _101 = _36(_79, _23._m0._m2);
    int _104 = _14._m0[_101];
    float _108 = _23._m0._m5;
    uint _112 = _36(_23._m0._m3, 2u);
    if (_23._m0._m4 == 1u)
    {
        _64 = _36(_88, 2u);
        _67 = _26(_88, 2u) == 0u;
        _70 = _67 ? (_79 + 1u) : (_79 - 1u);
    }
    else
    {
        _67 = _88 < _112;
        _64 = _67 ? _88 : (_88 - _112);
        _70 = _67 ? (_79 + _112) : (_79 - _112);
    }
    float _137 = _17._m0[_64];
    float _138 = (float(_104) * _108) * _137;
    float _139 = cos(_138);
    float _140 = sin(_138);
    if (_67)
    {
        _20._m0[_79] = (_11._m0[_79] * _139) - (_11._m0[_70] * _140);
        return;
    }
    else
    {
        _20._m0[_79] = (_11._m0[_70] * _140) + (_11._m0[_79] * _139);
        return;
    }
}

